"""Typer commands: parse, call one function in tpuops.ops, render. Nothing imports this package."""
