"""The embedded StackStorm engine: executions, the Orquesta workflow engine, runners, triggers.

One engine thread owns every workflow conductor and all workflow state; a thread pool runs
actions that leave the process (python-script and local runners, chat posts), whose processes
are the engine's children or, with the `runners` setting at 2 or more, those of N action
runner processes (fleet_runtime.action_runners). Durability:

1. every status change of an execution (a worker's result, an inquiry going pending, a child
   workflow finishing, a pause/resume/cancel request, an inquiry response) is written to SQLite
   as an event (with the execution row) *before* the engine applies it (transaction 1);
2. the engine applies the batch of events to the conductors (orquesta's own state machines),
   asks them for the next tasks and creates the child executions;
3. the conductor snapshots, task executions and new child executions are committed together
   (transaction 2); only then are the children started.

A runtime killed at any moment recovers on its next start (`Runtime.recover`): snapshots are
reloaded and the events after them replayed; children that were started but never reported
(status `running`) are marked `abandoned` like st2 marks executions of a runner shutting down,
and orquesta turns that into a failed task (retry / remediation decide what happens next),
except those lost with an action runner that died, which stay `running` as on st2;
children created but never started are started; delays and inquiry timeouts are re-armed.

The engine is one class, `Runtime`, assembled from mixins, one module per concern:
`model` (in-memory records, constants), `events` (what reaches the engine and what it applies),
`configs` (pack configs), `persistence` (the two transactions, status rows, events, recovery),
`workflows` (conductors, task executions, workflow controls), `actions` (starting executions,
workers, policies), `inquiries`, `triggers` (triggers, notify, rules) and `core` (construction,
the engine lock, requests, the run loop and timers). Statuses live in `fleet_runtime.statuses`.
"""
from fleet_runtime.engine.core import Runtime
from fleet_runtime.engine.model import ExecInfo, TaskRun, WorkflowRun

__all__ = ["ExecInfo", "Runtime", "TaskRun", "WorkflowRun"]
