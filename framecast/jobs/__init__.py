"""Jobs: a job's life. The per-guild queues, the scheduler, the runner and the leases.

The pure job model (kinds, states, the state machine, the records), the reasons and the presets
live on the ground floor, :mod:`framecast.values`; the moving parts live here, each in its own
module (``queues``, ``scheduler``, ``runner``, ``leases``, ``results``, ``fitting``, ...).
"""
