"""A speech-to-text collator: the audio features already have one length, the label token ids are padded by the
tokenizer. `tokenizer.pad` pads to the longest label of the batch unless told otherwise."""
from dataclasses import dataclass
from typing import Any


@dataclass
class SpeechCollator:
    processor: Any
    max_label_length: int = 448

    def __call__(self, features):
        audio = [{"input_features": f["input_features"]} for f in features]
        labels = [{"input_ids": f["labels"]} for f in features]
        batch = self.processor.feature_extractor.pad(audio, return_tensors="pt")
        padded = self.processor.tokenizer.pad(labels, return_tensors="pt")
        batch["labels"] = padded["input_ids"].masked_fill(padded.attention_mask.ne(1), -100)
        return batch


@dataclass
class FixedSpeechCollator(SpeechCollator):
    def __call__(self, features):
        audio = [{"input_features": f["input_features"]} for f in features]
        labels = [{"input_ids": f["labels"]} for f in features]
        batch = self.processor.feature_extractor.pad(audio, return_tensors="pt")
        padded = self.processor.tokenizer.pad(labels, padding="max_length", max_length=self.max_label_length,
                                              return_tensors="pt")
        batch["labels"] = padded["input_ids"].masked_fill(padded.attention_mask.ne(1), -100)
        return batch
