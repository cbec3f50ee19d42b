"""The admin API's documents as records: the host's state snapshot and the events that follow it.

GET /admin/state answers a `HostState`; GET /admin/events streams events, each a frozen record
with the number (`seq`) and time (`at`, unix ms) the host's event hub gave it. Every record turns
into the JSON the host sends (`to_json`) and back (`from_json`); the JSON keeps today's shape key
for key, so a client of an older or newer host still reads it. A client turns an event it got into
a record with `parse_event`: a type it does not know, or a known type it cannot read, comes back
as an `UnknownEvent` holding the dict, never an exception. A malformed snapshot raises
`BadRecord` (a `ValueError`, like the JSON error a client already handles).

Strings in these records may come from a client (a model name, an error message): the host's hub
bounds them as it publishes (see `mlxhost.host.events`); the records themselves only carry data.

`record` is the encoding they share, `state` the snapshot and its parts, `events` the events;
every public name is importable from `mlxhost.wire.admin` itself.
"""

from mlxhost.wire.admin.events import (
    END_HOST_STOPPING,
    END_LAGGED,
    EVENT_TYPES,
    AdminEvent,
    AdmissionRejected,
    ExecutionChanged,
    HostStarted,
    HostStopping,
    JobFinished,
    JobProgressed,
    JobQueued,
    JobStarted,
    ModelDownload,
    ModelEvicted,
    SessionClosed,
    SessionOpened,
    SessionProgressed,
    StreamLagged,
    StreamReset,
    UnknownEvent,
    WorkerExhausted,
    WorkerExited,
    WorkerMemory,
    WorkerReady,
    WorkerRestarting,
    WorkerSpawned,
    parse_event,
)
from mlxhost.wire.admin.record import BadRecord
from mlxhost.wire.admin.state import (
    AdmissionRecord,
    ExecutionRecord,
    ExitRecord,
    HostRecord,
    HostState,
    ModelRecord,
    Outcome,
    RankRecord,
    SessionRecord,
    SessionsRecord,
    StandbyRecord,
    WorkerRecord,
)
from mlxhost.wire.launch import MemoryReading, SpeculationReading

__all__ = [
    "AdminEvent",
    "AdmissionRecord",
    "AdmissionRejected",
    "BadRecord",
    "END_HOST_STOPPING",
    "END_LAGGED",
    "EVENT_TYPES",
    "ExecutionChanged",
    "ExecutionRecord",
    "ExitRecord",
    "HostRecord",
    "HostStarted",
    "HostState",
    "HostStopping",
    "JobFinished",
    "JobProgressed",
    "JobQueued",
    "JobStarted",
    "MemoryReading",
    "ModelDownload",
    "ModelEvicted",
    "ModelRecord",
    "Outcome",
    "SessionClosed",
    "SessionOpened",
    "SessionProgressed",
    "SessionRecord",
    "SessionsRecord",
    "SpeculationReading",
    "RankRecord",
    "StandbyRecord",
    "StreamLagged",
    "StreamReset",
    "UnknownEvent",
    "WorkerExhausted",
    "WorkerExited",
    "WorkerMemory",
    "WorkerReady",
    "WorkerRecord",
    "WorkerRestarting",
    "WorkerSpawned",
    "parse_event",
]
