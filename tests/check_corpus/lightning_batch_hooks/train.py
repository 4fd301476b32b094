import lightning.pytorch as pl
from transformers import AutoModelForCausalLM

from module import CausalLM, LossWatcher

model = CausalLM(AutoModelForCausalLM.from_pretrained("gpt2"))
trainer = pl.Trainer(accelerator="tpu", devices=8, max_steps=1000, callbacks=[LossWatcher()])
trainer.fit(model)
