import click

from ledger.loop import Loop


@click.group(name="jobs")
def jobs_group() -> None:
    """Training and scoring jobs."""


@jobs_group.command(name="fit")
@click.option("--epochs", default=3)
def fit_cmd(epochs: int) -> None:
    Loop(epochs).fit()


@jobs_group.command()
@click.argument("checkpoint")
def score_cmd(checkpoint: str) -> None:
    Loop(0).assess(checkpoint)


def register(cli: click.Group) -> None:
    cli.add_command(jobs_group)
