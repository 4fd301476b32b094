"""The cost guard: the spec's `autostop:` section (`spec.py`), the agent shipped to worker 0 as standard-library
text (`agent.py` with its part `agent_host.py`, sent by `shipped.agent_source`), talking to it over a runner
(`remote.py`), its configuration and status view (`client.py`), and the workflows over a Context
(`cost_guard.py`: install at `up`, refresh at `launch`, `tpuops autostop`, stop before `down`)."""
