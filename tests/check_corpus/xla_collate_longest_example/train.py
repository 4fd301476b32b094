import torch
import torch_xla.core.xla_model as xm
import torch_xla.distributed.parallel_loader as pl
from torch import nn

from speech_data import utterance_loader

device = xm.xla_device()
encoder = nn.LSTM(80, 256, num_layers=2, batch_first=True).to(device)
classify = nn.Linear(256, 64).to(device)
ctc = nn.CTCLoss(blank=0, zero_infinity=True)
optimizer = torch.optim.Adam([*encoder.parameters(), *classify.parameters()], lr=1e-3)

for epoch in range(5):
    for features, targets, lengths in pl.MpDeviceLoader(utterance_loader(512, batch_size=16), device):
        hidden, _ = encoder(features)
        log_probs = classify(hidden).log_softmax(-1).transpose(0, 1)
        target_lengths = (targets != 0).sum(-1)
        loss = ctc(log_probs, targets, lengths, target_lengths)
        optimizer.zero_grad()
        loss.backward()
        xm.optimizer_step(optimizer)
    xm.master_print(f"epoch {epoch} done")
