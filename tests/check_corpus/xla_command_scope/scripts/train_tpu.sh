#!/bin/bash
# How the authors train on a TPU VM: the module, from the top of the code directory.
export PJRT_DEVICE=TPU
python -m speechfit.main --epochs 3 --log_grad_norm "$@"
