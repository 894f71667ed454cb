"""Running a job on worker processes (``env.configure(workers=N)``, Flink's ``local.number-taskmanager``).

:mod:`placement` puts subtask ``i`` of every vertex in slot ``i`` and spreads the slots over the
workers (a loop's or an iteration's subtasks all on one); :mod:`worker` is a worker process,
running its subtasks under its own scheduler;
:mod:`links` carries the channels between workers, with credit-based backpressure; :mod:`wire`
encodes what travels (Arrow IPC for columnar batches, pickle for rows and events); :mod:`run`
is the driver's side, where the checkpoint coordinator stays and heartbeats are watched.
"""
