"""The shape of `settings.PORTAL`, the portal's own settings (read from the environment by
`portal/settings.py`), so every `settings.PORTAL["..."]` is type-checked."""

from __future__ import annotations

from datetime import timedelta
from typing import TypedDict


class PortalSettings(TypedDict):
    IMEX_SERVER_PORT: int  # IMEX ports every member daemon uses
    IMEX_CMD_PORT: int
    IMEX_CHANNEL_COUNT: int  # channel minors per tray (NVreg_ImexChannelCount); 0 is reserved
    FORMATION_DEADLINE: timedelta  # a domain not Ready by then fails
    RELEASE_DEADLINE: timedelta  # a release slower than this names the trays it waits for
    HEARTBEAT_STALE_AFTER: timedelta  # agent silence after which a tray counts as silent
    # Agent silence after which a placed domain's tray is replaced and its claims released.
    FAILOVER_GRACE: timedelta
    GPU_ALERT_S: int  # a GPU needs attention this long after an XID or NVLink errors rising
    GPU_HOT_C: int  # … and while at or above this temperature
    DRAIN_TOO_LONG_S: int  # a tray draining longer needs attention
    AGENT_JOIN_TOKEN: str
    # Kubernetes: the agents' ServiceAccounts ("<namespace>:<name>") whose projected tokens,
    # verified by TokenReview, join a tray instead of a join token; empty: not accepted.
    AGENT_SERVICE_ACCOUNTS: list[str]
    AGENT_TOKEN_AUDIENCE: str  # the audience those tokens must be issued for
    AGENT_TOKEN_CACHE_S: int  # how long a token's review is re-used (at most its expiry)
    DEFAULT_LIFETIME: timedelta  # a domain's lease when the request names none
    DEMO_USERS_ALLOWED: bool
    KUBE_ENABLED: bool
    UNVERIFIED_JOINS: bool  # a tray may join a workload-following domain on an unchecked claim
    KUBE_RACK_LABEL: str
    KUBE_NAMESPACE_LABEL: str
    KUBE_SLOT_LABEL: str  # node label holding a tray's 1-based slot; "" = next free slot
    METRICS_TOKEN: str
    SMALLEST_REQUEST_NODES: int  # smallest domain a tenant may request, in trays
    TRUSTED_PROXIES: list[str]  # reverse proxies in front of the web processes
    TOKEN_FAILURE_LIMIT: int
    SIGNIN_ADDRESS_CEILING: int  # failed sign-ins per address in 5 min before it is paced
    SIGNIN_ADDRESS_PACE_S: int  # past it, one password check per this many seconds
    BASE_URL: str  # the portal's address as users reach it (links in e-mail); "" = none
    NOTIFY_ATTEMPTS: int  # tries at sending one e-mail or webhook notification
    NOTIFY_BACKOFF_S: int  # first retry after this, then doubling
    WEBHOOK_ALLOWED_NETS: list[str]  # networks a webhook may reach besides public addresses
    WEBHOOK_CONNECT_TIMEOUT_S: int  # a webhook's receiver must accept within this
    WEBHOOK_TIMEOUT_S: int  # ... and answer within this
    WEBHOOK_BREAKER_FAILURES: int  # failed tries in a row that open a target's breaker
    WEBHOOK_BREAKER_OPEN_S: int  # how long an open breaker skips its target
    SUBSCRIPTIONS_PER_USER: int
    SUBSCRIPTIONS_PER_NAMESPACE: int
    TOKEN_MINTS_PER_MIN: int  # API tokens one user may mint per minute
    SUBSCRIPTION_CREATES_PER_MIN: int  # subscriptions one user may create per minute
    SOCKETS_PER_USER: int  # open live-page websockets per user and web process
    SOCKETS_PER_NODE: int  # open agent websockets per tray and web process
    TRAY_ALLOWED_NETS: list[str]  # loopback/link-local networks trays may have IPs in
    OWN_ADDRESSES: list[str]  # the portal's own addresses, which no tray may claim
    FOLD_REPORTS_ON_WORKER: bool  # changing reports folded on a worker, per domain and burst
