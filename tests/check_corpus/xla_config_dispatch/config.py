"""Settings of the run, set by editing this file."""


class Config:
    def __init__(self) -> None:
        self.cores = "single"
        self.cores = "multi"
        self.batch_size = 32
        self.steps = 1000
