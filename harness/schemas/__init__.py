"""The result models every procedure writes and every report reads, in one place: the procedures import them,
never the other way round."""

from harness.schemas.audit import AuditResult, EndpointAudit, FamilyAudit, LiveFacts
from harness.schemas.capacity import SLA, CapacityResult, CapacitySummary, Probe
from harness.schemas.compare import SIDES, AAReference, CompareSummary, Decision, Stopping
from harness.schemas.deploy import AppliedConfig, PublishedResult, ServedModel
from harness.schemas.verdicts import Components, DeltaInterval, Instability, LevelDelta, Routing, Verdict
from harness.schemas.window import (
    Calibration,
    ClientHealth,
    Dist,
    DtypeChoice,
    GpuWindow,
    LayerMetric,
    Leveled,
    LevelHold,
    LevelStats,
    LevelSummary,
    Modes,
    ProcessCores,
    ReplicaLoad,
    RunSummary,
    ServerLevelMetrics,
    Stationarity,
    level_text,
    levels_text,
)

__all__ = ["SIDES", "AAReference", "Decision", "Stopping",
           "AppliedConfig", "AuditResult", "Calibration", "CapacityResult", "CapacitySummary",
           "ClientHealth", "Components", "CompareSummary", "DeltaInterval", "Dist", "DtypeChoice", "EndpointAudit",
           "FamilyAudit", "GpuWindow", "Instability", "LayerMetric", "LevelDelta", "LevelHold", "LevelStats",
           "LevelSummary", "Leveled", "LiveFacts", "Modes", "Probe", "ProcessCores", "PublishedResult", "ReplicaLoad",
           "Routing", "RunSummary", "SLA", "ServedModel", "ServerLevelMetrics", "Stationarity", "Verdict",
           "level_text", "levels_text"]
