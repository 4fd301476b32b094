"""Fixed-length blocks of token ids for the pretraining loop."""
import torch


def build_dataset(args):
    ids = torch.load(args.token_file)
    usable = (len(ids) // args.seq_len) * args.seq_len
    return ids[:usable].view(-1, args.seq_len)


def collate(rows):
    input_ids = torch.stack(rows)
    labels = input_ids.clone()
    return {"input_ids": input_ids, "labels": labels}
