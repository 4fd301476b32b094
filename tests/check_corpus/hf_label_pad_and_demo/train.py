"""The fine-tuning script these helpers belong to: Seq2SeqTrainer on a TPU with bf16."""
from transformers import Seq2SeqTrainer, Seq2SeqTrainingArguments

from collator import SpeechCollator


def train(model, processor, train_set):
    args = Seq2SeqTrainingArguments(output_dir="out", bf16=True, per_device_train_batch_size=16,
                                    dataloader_drop_last=True)
    trainer = Seq2SeqTrainer(model=model, args=args, train_dataset=train_set,
                             data_collator=SpeechCollator(processor))
    trainer.train()
