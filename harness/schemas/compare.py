"""A compare as it is stored in compare.json and read by every report."""

from __future__ import annotations

from pydantic import BaseModel

from harness.profile.engine import SLO, EmulatedStep
from harness.schemas.audit import AuditResult
from harness.schemas.deploy import AppliedConfig, PublishedResult, ServedModel
from harness.schemas.profiles import Diagnosis
from harness.schemas.verdicts import MARGIN, Components, Instability, LevelDelta
from harness.schemas.window import RunSummary

# A compare's two sides, in the order every record lists them.
SIDES = ("baseline", "stack")


class AAReference(BaseModel):
    """The latest A/A compare (bare vLLM vs bare vLLM) of the same profile: this host's noise floor."""

    run_id: str
    # level (c, or req/s in an open loop) -> (delta %, interval half-width %, verdict)
    levels: dict[int | float, tuple[float | None, float | None, str]]
    components: dict[str, Components] = {}  # per endpoint: its variance components (pooled in)
    pairs: int = 0


class Decision(BaseModel):
    """An endpoint's verdict at a level, as the look that made it decided it."""

    verdict: str
    pairs: int  # pairs measured at that look


class DeploymentTime(BaseModel):
    """What one deployment of a compare took, in wall seconds (harness.measure.budget)."""

    side: str  # baseline | stack
    pair: int  # 1-based
    start_s: float  # deploy to ready
    judged_s: float  # ready to its judged windows done (the warm-up sweep among them)
    profiled_s: float = 0.0  # its profiled windows
    other_s: float = 0.0  # teardown, and the check that the previous deployment was gone
    profile_only: bool = False  # a profiled pass of its own: no judged window


class Stopping(BaseModel):
    """How a sequential compare chose its pairs (harness.analysis.sequential, harness.measure.planning)."""

    rule: str = "sequential"  # sequential | fixed
    max_pairs: int
    budget_s: float | None = None
    target_mde: float  # a share
    plan: list[str] = []  # the plan's sentences, as printed before the first deployment
    looks: list[int] = []  # pairs measured at each look
    decided: dict[str, dict[float, Decision]] = {}  # endpoint -> level -> its decision
    pair_s: list[float] = []  # wall seconds each complete pair took, starts included
    stopped: str | None = None  # why no further pair was deployed
    min_pairs: int = 2  # the fewest pairs it ran whatever the budget
    deployments: list[DeploymentTime] = []  # each deployment's seconds, in the order they ran
    predicted_s: list[float | None] = []  # at each look: what the next pair was predicted to take
    profiled: dict[str, str] = {}  # side -> where its profiled windows ran and what they cost, or why they did not

    def level_pairs(self, level: float) -> int | None:
        """The pairs the level took: the last of its endpoints' decisions (None: not every endpoint decided)."""
        got = [d.get(level) for d in self.decided.values()]
        return max(x.pairs for x in got) if got and all(got) else None  # type: ignore[union-attr]


class CompareSummary(BaseModel):
    run_id: str
    stack: str
    baseline_stack: str
    in_request_path: bool
    shape: str | None = None  # which form of the stack, where it has several (KServe: "raw mode")
    replay: str | None = None  # a trace profile's replay as the first screen names it (Trace.describe())
    published: PublishedResult | None = None  # what a study measured for this shape (the report compares)
    profile: str
    repeats: int  # measured sweeps per deployment
    pairs: int = 1  # deployment pairs
    deployments: str = "sequential"  # the profile's: one deployment up at a time, or a pair's both (interleaved)
    order: list[int] = []  # per pair: +1 the baseline was deployed first, -1 the stack; 0 windows interleaved
    margin: float = MARGIN  # the equivalence margin (profile's equivalence_margin)
    ttft_margin: float | None = None  # TTFT p95's, where the profile sets its own (ttft_margin)

    def margin_of(self, endpoint: str) -> float:
        return self.ttft_margin if endpoint == "ttft_p95" and self.ttft_margin else self.margin
    components: dict[str, Components] = {}  # this compare's own variance components per endpoint
    instability: Instability | None = None
    left_out: dict[int | float, str] = {}  # levels of the profile not measured, and why (gpu-like calibration)
    versions: dict[str, str]
    version_match: bool
    applied: dict[str, AppliedConfig]
    settings_match: bool
    settings_mismatches: list[str]
    options: dict
    frontend: str | None = None  # the API server on each side (stacks.base.engine_frontend.frontend_note)
    status: str = "running"
    failures: dict[str, str] = {}
    levels: list[LevelDelta] = []
    audit: AuditResult | None = None
    wall_s: float | None = None
    runs: dict[str, RunSummary] = {}
    aa: AAReference | None = None
    scrape_policy: str = "boundary"
    observer_effect: str | None = None  # what the observer benchmark measured for this policy, where it exists
    placement: str | None = None
    host_cores: int = 0
    invocations: int = 1  # how many `compare` / `compare --resume` invocations measured it
    slo: SLO | None = None  # the profile's, which goodput and the report's capacity are judged by
    diagnosis: Diagnosis | None = None  # why the layer costs, per level (harness.analysis.diagnose)
    metricless: dict[str, str] = {}  # the stack's Stack.metricless_endpoints(): listed by the audit, not scraped
    renames: tuple[str, ...] | None = None  # the stack's Stack.metric_aliases(), for reading its scrapes again
    emulated_step: EmulatedStep | None = None  # the GPU-like engine's configured step (engine.model: gpu-like)
    model: ServedModel | None = None  # what both sides served: id, resolved revision, config digest
    devices: list[int] = []  # the GPUs each side was given (the same for both); [] on a host without GPUs
    gpu_host: dict | None = None  # the host's GPUs (harness.host.gpus.GpuHost.to_json); None: no GPU
    target: str = "local"  # where both sides ran: local, k8s or docker
    # what one pair's noise depends on (harness.procedures.compare.noise_key): an A/A floors only a compare of the
    # same key
    noise_key: dict[str, str] = {}
    cluster: dict | None = None  # k8s/docker: the context, server, namespace, and each side's images and nodes
    stopping: Stopping | None = None  # a sequential compare: its plan, looks and why it stopped
    start_s: dict[str, list[float]] = {}  # side -> seconds each of its deployments took to answer, pair by pair
    # a report folder's summary judged again without its windows (harness.analysis.rejudge): each changed level,
    # "c=16: gain (goodput) -> inconclusive"; None: the verdicts are the ones the compare made
    rejudged: list[str] | None = None

    @property
    def on_gpu(self) -> bool:
        """Measured on a GPU host (the CPU-host readings of the report do not apply)."""
        return bool(self.devices)

    @property
    def open_loop(self) -> bool:
        """Its levels are offered request rates (an open-loop profile)."""
        return any(lv.rate is not None for lv in self.levels)

    @property
    def is_aa(self) -> bool:
        """The same stack on both sides (bare vLLM against bare vLLM): differences are this host's noise."""
        return self.stack == self.baseline_stack

    @property
    def measured_repeats(self) -> set[tuple[str, float, int]]:
        """(side, level, repeat) of every repeat that counts in the figures (not stopped early)."""
        return {(label, lv.stats.level, lv.stats.repeat) for label, run in self.runs.items() for lv in run.levels
                if lv.incomplete is None}

    @property
    def top(self) -> LevelDelta | None:
        """The highest level with a delta: the one a headline quotes."""
        return next((lv for lv in reversed(self.levels) if lv.delta_pct is not None), None)
