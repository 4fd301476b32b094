import torch
from accelerate import Accelerator

from speaker import Speaker
from voices import VoiceModel, voice_batches

accelerator = Accelerator(mixed_precision="bf16")
model = VoiceModel()
optimizer = torch.optim.AdamW(model.parameters(), lr=2e-4)
loader = voice_batches(batch_size=16)
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
speaker = Speaker(accelerator.unwrap_model(model), accelerator.device)
for epoch in range(10):
    for batch in loader:
        loss = model(**batch).loss
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
    sample = speaker.speak(torch.tensor([[1, 17, 93, 4]]))
    accelerator.print(f"epoch {epoch}: sample of {sample.shape[1]} tokens")
