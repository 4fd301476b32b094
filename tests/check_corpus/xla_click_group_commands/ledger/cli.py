"""`python -m ledger.cli jobs fit`: a Click tool whose command groups live in modules of their own."""

import click

from ledger.jobs import register


@click.group()
@click.option("--verbose", is_flag=True)
def cli(verbose: bool) -> None:
    click.echo("ledger" + (" (verbose)" if verbose else ""))


register(cli)

if __name__ == "__main__":
    cli()
