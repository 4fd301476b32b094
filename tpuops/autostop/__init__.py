"""The cost guard's client parts, over a runner (nothing here imports a workflow): talking to the agent on
worker 0 (`remote.py`: install, stop, read), its configuration, status view and the cost so far (`client.py`).

Its other parts carry its name in their layers: the spec's `autostop:` section (`spec/autostop.py`), the record
the agent leaves in the bucket (`state/autostop.py`), the agent itself, shipped as standard-library text
(`shipped/autostop_agent.py` with its part `shipped/autostop_agent_host.py`, sent by `shipped.program`), and the
workflows over a Context (`ops/autostop.py`: install at `up`, refresh at `launch`, `tpuops autostop`, stop before
`down`)."""
