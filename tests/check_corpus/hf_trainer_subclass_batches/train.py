"""Distillation with the Hugging Face Trainer: a subclass adds the teacher's loss and keeps its own tallies."""
import torch
import torch.nn.functional as F
from transformers import AutoModelForSequenceClassification, Trainer, TrainerCallback, TrainingArguments

from data import glue_splits


class DistillTrainer(Trainer):
    def __init__(self, *args, teacher=None, temperature=2.0, **kwargs):
        super().__init__(*args, **kwargs)
        self.teacher, self.temperature = teacher, temperature
        self.tallies = {"student": [], "agreement": []}

    def compute_loss(self, model, inputs, return_outputs=False, **kwargs):
        outputs = model(**inputs)
        with torch.no_grad():
            teacher_logits = self.teacher(**inputs).logits
        soft = F.kl_div(F.log_softmax(outputs.logits / self.temperature, -1),
                        F.softmax(teacher_logits / self.temperature, -1), reduction="batchmean")
        loss = outputs.loss + soft
        self.tallies["student"].append(outputs.loss.item())
        if self.state.global_step % self.args.logging_steps == 0:
            self.log({"distill/soft": float(soft)})
        return (loss, outputs) if return_outputs else loss

    def prediction_step(self, model, inputs, prediction_loss_only, ignore_keys=None):
        loss, logits, labels = super().prediction_step(model, inputs, prediction_loss_only, ignore_keys)
        agree = (logits.argmax(-1) == self.teacher(**inputs).logits.argmax(-1)).float().mean()
        self.tallies["agreement"].append(agree.cpu())
        return loss, logits, labels


class ProbeCallback(TrainerCallback):
    """After each evaluation, the positive-class probability of a few fixed sentences."""

    def __init__(self, probes):
        self.probes = probes

    def on_evaluate(self, args, state, control, model=None, **kwargs):
        for probe in self.probes:
            logits = model(**probe).logits
            print(f"probe: {logits.softmax(-1)[0, 1].item():.3f}")


if __name__ == "__main__":
    train_set, eval_set = glue_splits("sst2")
    student = AutoModelForSequenceClassification.from_pretrained("distilbert-base-uncased", num_labels=2)
    teacher = AutoModelForSequenceClassification.from_pretrained("textattack/bert-base-uncased-SST-2").eval()
    args = TrainingArguments("out", per_device_train_batch_size=32, num_train_epochs=3, logging_steps=50,
                             eval_strategy="epoch", bf16=True)
    probes = [{k: torch.tensor([v]) for k, v in eval_set[i].items() if k in ("input_ids", "attention_mask")}
              for i in range(4)]
    DistillTrainer(model=student, args=args, train_dataset=train_set, eval_dataset=eval_set, teacher=teacher,
                   callbacks=[ProbeCallback(probes)]).train()
