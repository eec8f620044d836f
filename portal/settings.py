"""Domain Portal settings: one module, driven by the environment.

DATABASE_URL  PostgreSQL, the one engine everywhere (`make demo` and `make test` start a
              private server when none is named: testbed/devservices.py).
REDIS_URL     Celery broker, Channels layer and cache.
SECRET_KEY    required when DEBUG is off.
DEBUG         "1"/"true" for development and the demo only.
ALLOWED_HOSTS comma-separated.
"""

from __future__ import annotations

import os
import sys
from datetime import timedelta
from pathlib import Path

import django_stubs_ext
from csp.constants import NONE, SELF, UNSAFE_INLINE
from django.core.exceptions import ImproperlyConfigured

from portal.environ import (
    database_from_env,
    env_bool,
    env_int,
    env_list,
    redis_database,
    test_worker_index,
)
from portal.openapi_settings import SPECTACULAR_SETTINGS  # noqa: F401  (read by drf-spectacular)
from portal.settings_types import PortalSettings

# Lets generic classes be subscripted at run time as they are in annotations
# (`admin.ModelAdmin[Node]`), as django-stubs expects.
django_stubs_ext.monkeypatch()

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("PORTAL_VAR_DIR", BASE_DIR / "var"))


DEBUG = env_bool("DEBUG")
# Test runs (pytest, or processes started by tests with PORTAL_TESTING=1).
TESTING = env_bool("PORTAL_TESTING") or "pytest" in sys.modules

SECRET_KEY = os.environ.get("SECRET_KEY", "")
if not SECRET_KEY:
    if not (DEBUG or TESTING):
        raise ImproperlyConfigured("SECRET_KEY must be set when DEBUG is off")
    SECRET_KEY = "insecure-dev-only-key-" + "x" * 40

ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", "localhost,127.0.0.1,[::1]" if DEBUG or TESTING else "")
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "django.contrib.humanize",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "channels",
    "axes",
    "csp",
    "domains.audit",
    "domains.inventory",
    "domains.tenancy",
    "domains.computedomains",
    "domains.agents",
    "domains.kube",
    "domains.foresight",
    "domains.notifications",
    "domains.demo",
    "portal.web",
    "portal.api",
    "portal.realtime",
    "portal.receipts",
]

MIDDLEWARE = [
    "portal.middleware.RequestIdMiddleware",
    # Outermost but one: sees a lost database in any view (PostgreSQL away → 503).
    "portal.outage.DatabaseAwayMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "csp.middleware.CSPMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Last, as django-axes asks: turns a locked-out sign-in into its 429 page.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "portal.urls"
ASGI_APPLICATION = "portal.asgi.application"
WSGI_APPLICATION = None

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASES = {"default": database_from_env()}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
if TESTING and (worker := test_worker_index()) is not None:
    # The test suite split over workers (pytest-xdist names them gw0, gw1, …; the processes
    # a worker starts inherit the name): each worker and its processes take the next Redis
    # databases after the one named (gw0 the first after it), as pytest-django gives each its
    # own PostgreSQL database, so one worker's rate-limit counts, locks and Channels groups
    # never meet another's.
    REDIS_URL = redis_database(REDIS_URL, 1 + worker)

CACHES = {
    "default": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": REDIS_URL,
        "KEY_PREFIX": os.environ.get("CACHE_KEY_PREFIX", "portal"),
        # Redis away must not hang a request (the rate limiter then counts locally).
        "OPTIONS": {"socket_connect_timeout": 2, "socket_timeout": 2},
    }
}

CHANNEL_LAYERS = {
    "default": {
        "BACKEND": "channels_redis.core.RedisChannelLayer",
        "CONFIG": {
            "hosts": [REDIS_URL],
            "prefix": os.environ.get("CHANNELS_PREFIX", "asgi"),
            "capacity": 1000,
            "expiry": 30,
        },
    }
}

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
if TESTING:
    # Tests create many users; the default PBKDF2 costs ~0.3 s per password on CI cores.
    PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = Path(os.environ.get("STATIC_ROOT", BASE_DIR / "staticfiles"))
# Development and tests serve static files straight from static/ (no collectstatic needed).
WHITENOISE_USE_FINDERS = DEBUG or TESTING
WHITENOISE_AUTOREFRESH = DEBUG or TESTING
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"
        if DEBUG or TESTING
        else "whitenoise.storage.CompressedManifestStaticFilesStorage"
    },
}

# --- security: production defaults that pass `manage.py check --deploy` -------------------
SESSION_COOKIE_HTTPONLY = True
CSRF_COOKIE_HTTPONLY = False  # htmx reads the token from the cookie-less meta tag anyway
X_FRAME_OPTIONS = "DENY"
CSRF_FAILURE_VIEW = "portal.api.errors.csrf_failure"  # JSON under /api/, Django's page elsewhere
# Content-Security-Policy (django-csp) on every response: scripts only from our own static
# files (no inline script, no eval: htmx's hx-on/js: are not used), websockets and fetches
# to the portal itself, nothing framed. Inline styles stay allowed: the pages' bar widths,
# htmx's indicator styles and Swagger UI set them, and a style cannot run code.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": [SELF],
        "script-src": [SELF],
        "style-src": [SELF, UNSAFE_INLINE],
        "img-src": [SELF, "data:"],
        "font-src": [SELF, "data:"],
        "connect-src": [SELF],
        "object-src": [NONE],
        "base-uri": [NONE],
        "form-action": [SELF],
        "frame-ancestors": [NONE],
    }
}
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
if not DEBUG and not TESTING:
    # Whether a request came over HTTPS is uvicorn's to say: it takes X-Forwarded-Proto
    # only from PORTAL_TRUSTED_PROXIES (portal/serve.py), so no SECURE_PROXY_SSL_HEADER,
    # which Django would believe from anyone.
    SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", True)
    # Every path but the three that Prometheus and the kubelet ask inside the cluster, over
    # plain HTTP on the pod's address (a ServiceMonitor, an httpGet probe): redirected to
    # https://<pod IP>:80 they would only fail. The agent API (node tokens), the pages and
    # the API still go to HTTPS. Matched against the path without its leading slash.
    SECURE_REDIRECT_EXEMPT = [r"^(metrics|healthz|readyz)$"]
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 31536000)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", True)

# --- REST framework ------------------------------------------------------------------------
REST_FRAMEWORK = {
    # Bearer first: a script's token wins over a stray session cookie. Session auth keeps
    # CSRF on for signed-in browsers.
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "portal.api.authentication.BearerTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": [
        "rest_framework.permissions.IsAuthenticated",
        "portal.api.permissions.TokenScope",
    ],
    "DEFAULT_PARSER_CLASSES": ["portal.api.parsers.BoundedJSONParser"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_PAGINATION_CLASS": "portal.api.pagination.Pagination",
    "PAGE_SIZE": 100,
    "EXCEPTION_HANDLER": "portal.api.errors.exception_handler",
}

# --- Celery --------------------------------------------------------------------------------
CELERY_BROKER_URL = os.environ.get("CELERY_BROKER_URL", REDIS_URL)
CELERY_RESULT_BACKEND = None
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TIMEZONE = "UTC"
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 300}
# Reconnects after Redis went away with tasks unacknowledged (portal/worker_consumer.py).
CELERY_WORKER_CONSUMER = "portal.worker_consumer:Consumer"
CELERY_TASK_DEFAULT_QUEUE = os.environ.get("CELERY_QUEUE", "portal")
# Notifications (deliveries) go to "<default queue>.notifications", served by a worker of
# their own (`celery -A portal worker -Q portal.notifications`): portal/celery.py.
CELERY_TASK_ROUTES = ("portal.celery.route_task",)
CELERY_BEAT_SCHEDULE_FILENAME = str(VAR_DIR / "celerybeat-schedule")
CELERY_BEAT_SCHEDULE: dict[str, dict] = {
    # Write receipts (portal.outage) older than a day.
    "purge-receipts": {"task": "portal.purge_receipts", "schedule": 3600.0},
    "reconcile": {
        "task": "computedomains.reconcile",
        "schedule": float(os.environ.get("PORTAL_RECONCILE_SECONDS", 5)),
    },
    # Members of trays whose agent went silent; trays lost to placed domains replaced.
    "reap-heartbeats": {
        "task": "computedomains.reap_stale_heartbeats",
        "schedule": float(os.environ.get("PORTAL_REAP_SECONDS", 10)),
    },
    # Each waiting domain's placement estimate (also refreshed whenever the queue moves).
    "refresh-estimates": {
        "task": "foresight.refresh_estimates",
        "schedule": float(os.environ.get("PORTAL_ESTIMATE_SECONDS", 15)),
    },
    # Leases ending soon and maintenance ahead: each subscriber told once.
    "notify-ahead": {
        "task": "notifications.scan_ahead",
        "schedule": float(os.environ.get("PORTAL_NOTIFY_SCAN_SECONDS", 60)),
    },
    # The portal's health: operators told when it turns bad and when it recovers.
    "health-watch": {
        "task": "notifications.health_watch",
        "schedule": float(os.environ.get("PORTAL_HEALTH_WATCH_SECONDS", 10)),
    },
    # Publishes to Kubernetes whatever a lost message or an API outage left (no-op when off).
    "kube-reconcile": {
        "task": "kube.reconcile",
        "schedule": float(os.environ.get("PORTAL_KUBE_RECONCILE_SECONDS", 30)),
    },
}

# --- Domain Portal -------------------------------------------------------------------------
PORTAL: PortalSettings = {
    # IMEX ports every member daemon uses (one daemon per tray, so one port pair suffices).
    "IMEX_SERVER_PORT": env_int("PORTAL_IMEX_SERVER_PORT", 50000),
    "IMEX_CMD_PORT": env_int("PORTAL_IMEX_CMD_PORT", 50005),
    # Channel minors per node (NVreg_ImexChannelCount). All mode hands out every one of
    # them; the Single-mode ledger never hands out channel 0.
    "IMEX_CHANNEL_COUNT": env_int("PORTAL_IMEX_CHANNEL_COUNT", 2048),
    "FORMATION_DEADLINE": timedelta(seconds=env_int("PORTAL_FORMATION_DEADLINE_S", 300)),
    "RELEASE_DEADLINE": timedelta(seconds=env_int("PORTAL_RELEASE_DEADLINE_S", 300)),
    "HEARTBEAT_STALE_AFTER": timedelta(seconds=env_int("PORTAL_HEARTBEAT_STALE_S", 30)),
    # A tray marked down is replaced in its placed domain at once; one whose agent is silent
    # this long is too (a restarted agent is back long before). docs/configuration.md.
    "FAILOVER_GRACE": timedelta(seconds=env_int("PORTAL_FAILOVER_GRACE_S", 60)),
    # A GPU needs attention this long after an XID or a rise of its NVLink error counters,
    # and while it runs at or above GPU_HOT_C (domains/inventory/gpuhealth.py).
    "GPU_ALERT_S": env_int("PORTAL_GPU_ALERT_S", 3600),
    "GPU_HOT_C": env_int("PORTAL_GPU_HOT_C", 85),
    # A tray draining longer than this shows in the operators' needs-attention list.
    "DRAIN_TOO_LONG_S": env_int("PORTAL_DRAIN_TOO_LONG_S", 4 * 3600),
    "AGENT_JOIN_TOKEN": os.environ.get("PORTAL_AGENT_JOIN_TOKEN", ""),
    # Kubernetes: agents join with their pod's projected service-account token, verified by
    # TokenReview and bound to the node the pod runs on (domains/kube/tokenreview.py).
    "AGENT_SERVICE_ACCOUNTS": env_list("PORTAL_AGENT_SERVICE_ACCOUNTS"),
    "AGENT_TOKEN_AUDIENCE": os.environ.get("PORTAL_AGENT_TOKEN_AUDIENCE", "domain-portal"),
    "AGENT_TOKEN_CACHE_S": env_int("PORTAL_AGENT_TOKEN_CACHE_S", 60),
    "DEFAULT_LIFETIME": timedelta(hours=env_int("PORTAL_DEFAULT_LIFETIME_H", 24)),
    "DEMO_USERS_ALLOWED": DEBUG,
    "KUBE_ENABLED": env_bool("PORTAL_KUBE_ENABLED", bool(os.environ.get("KUBECONFIG"))),
    # Without Kubernetes a claim cannot be checked: a tray may join a domain that follows
    # its workload on the agent's word only where this allows it (domains/kube/claimcheck.py).
    "UNVERIFIED_JOINS": env_bool("PORTAL_UNVERIFIED_JOINS", False),
    "KUBE_RACK_LABEL": os.environ.get("PORTAL_KUBE_RACK_LABEL", "topology.kubernetes.io/rack"),
    "KUBE_NAMESPACE_LABEL": os.environ.get("PORTAL_KUBE_NAMESPACE_LABEL", ""),
    # Node label holding a tray's 1-based slot in its rack; empty: the next free slot.
    "KUBE_SLOT_LABEL": os.environ.get("PORTAL_KUBE_SLOT_LABEL", ""),
    "METRICS_TOKEN": os.environ.get("PORTAL_METRICS_TOKEN", ""),
    # The smallest domain a tenant may request (trays). Free trays of a clique fewer than
    # this can serve nobody: the fabric view counts them as stranded.
    "SMALLEST_REQUEST_NODES": env_int("PORTAL_MIN_DOMAIN_NODES", 1),
    # Reverse proxies (ingress) in front of the web processes, as addresses or networks:
    # only their X-Forwarded-For/-Proto are believed, by uvicorn (`python -m portal.serve`
    # passes them as --forwarded-allow-ips). Empty: no proxy, the peer is the client.
    "TRUSTED_PROXIES": env_list("PORTAL_TRUSTED_PROXIES"),
    # Failed bearer tokens per client address in 5 minutes before they are answered 429
    # (a tenth of it per token prefix and address); valid tokens are never refused.
    "TOKEN_FAILURE_LIMIT": env_int("PORTAL_TOKEN_FAILURE_LIMIT", 100),
    # Failed sign-ins per client address in 5 minutes, whatever accounts they tried, past
    # which that address gets one password check per SIGNIN_ADDRESS_PACE_S seconds: slowed,
    # never locked (a shared NAT keeps working). Per account and address, django-axes locks.
    "SIGNIN_ADDRESS_CEILING": env_int("PORTAL_SIGNIN_ADDRESS_CEILING", 100),
    "SIGNIN_ADDRESS_PACE_S": env_int("PORTAL_SIGNIN_ADDRESS_PACE_S", 2),
    # Notifications: links in e-mail start with BASE_URL; an e-mail or webhook is tried
    # NOTIFY_ATTEMPTS times, the first retry after NOTIFY_BACKOFF_S seconds, then doubling.
    "BASE_URL": os.environ.get("PORTAL_BASE_URL", ""),
    "NOTIFY_ATTEMPTS": env_int("PORTAL_NOTIFY_ATTEMPTS", 6),
    "NOTIFY_BACKOFF_S": env_int("PORTAL_NOTIFY_BACKOFF_S", 30),
    # Webhooks go to public addresses only, and to these networks (CIDRs): the demo's and
    # the tests' receivers listen on loopback. See domains/notifications/egress.py.
    "WEBHOOK_ALLOWED_NETS": env_list(
        "PORTAL_WEBHOOK_ALLOWED_NETS", "127.0.0.0/8,::1/128" if DEBUG or TESTING else ""
    ),
    # Webhooks: seconds to accept and to answer; failures in a row that open a target's
    # breaker, and for how long (domains/notifications/delivery.py).
    "WEBHOOK_CONNECT_TIMEOUT_S": env_int("PORTAL_WEBHOOK_CONNECT_TIMEOUT_S", 2),
    "WEBHOOK_TIMEOUT_S": env_int("PORTAL_WEBHOOK_TIMEOUT_S", 5),
    "WEBHOOK_BREAKER_FAILURES": env_int("PORTAL_WEBHOOK_BREAKER_FAILURES", 3),
    "WEBHOOK_BREAKER_OPEN_S": env_int("PORTAL_WEBHOOK_BREAKER_OPEN_S", 60),
    # Subscriptions one user may hold, and all users together in one namespace.
    "SUBSCRIPTIONS_PER_USER": env_int("PORTAL_SUBSCRIPTIONS_PER_USER", 20),
    "SUBSCRIPTIONS_PER_NAMESPACE": env_int("PORTAL_SUBSCRIPTIONS_PER_NAMESPACE", 50),
    # Per user and minute: API tokens minted and subscriptions created (429 past either).
    "TOKEN_MINTS_PER_MIN": env_int("PORTAL_TOKEN_MINTS_PER_MIN", 20),
    "SUBSCRIPTION_CREATES_PER_MIN": env_int("PORTAL_SUBSCRIPTION_CREATES_PER_MIN", 20),
    # Open websockets per web process: a user's live pages, a tray's agent sockets.
    "SOCKETS_PER_USER": env_int("PORTAL_SOCKETS_PER_USER", 50),
    "SOCKETS_PER_NODE": env_int("PORTAL_SOCKETS_PER_NODE", 4),
    # Loopback/link-local networks trays' IPs may be in (the emulated trays' 127.0.0.0/8).
    "TRAY_ALLOWED_NETS": env_list(
        "PORTAL_TRAY_ALLOWED_NETS", "127.0.0.0/8" if DEBUG or TESTING else ""
    ),
    # Addresses of the portal itself (its service or pod IPs) no tray may claim, besides
    # the ones it finds: this host's, ALLOWED_HOSTS' and the database's.
    "OWN_ADDRESSES": env_list("PORTAL_OWN_ADDRESSES"),
    # Agents' reports that change their members are folded on a worker, once per burst per
    # domain. Off: folded in the request, one by one. Off by default only inside pytest's
    # own process, whose tests read the effect of a report right after sending it (the
    # servers and workers that tests start run the worker path).
    "FOLD_REPORTS_ON_WORKER": env_bool(
        "PORTAL_FOLD_REPORTS_ON_WORKER", "pytest" not in sys.modules
    ),
}

# --- e-mail (notifications) ------------------------------------------------------------------
# Django's mail settings from the environment. EMAIL_BACKEND may name Django's file-based
# backend (with EMAIL_FILE_PATH) for a demo without a mail server.
EMAIL_BACKEND = os.environ.get("EMAIL_BACKEND", "django.core.mail.backends.smtp.EmailBackend")
EMAIL_HOST = os.environ.get("EMAIL_HOST", "localhost")
EMAIL_PORT = env_int("EMAIL_PORT", 25)
EMAIL_HOST_USER = os.environ.get("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = os.environ.get("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS")
EMAIL_USE_SSL = env_bool("EMAIL_USE_SSL")
EMAIL_TIMEOUT = env_int("EMAIL_TIMEOUT", 10)
if os.environ.get("EMAIL_FILE_PATH"):
    EMAIL_FILE_PATH = os.environ["EMAIL_FILE_PATH"]
DEFAULT_FROM_EMAIL = os.environ.get("DEFAULT_FROM_EMAIL", "domain-portal@localhost")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {
        "request_id": {"()": "portal.logging.RequestIdFilter"},
        "periodic_tasks": {
            "()": "portal.logging.PeriodicTaskChatter",
            "periodic": sorted({entry["task"] for entry in CELERY_BEAT_SCHEDULE.values()}),
        },
        "no_client_error_traceback": {"()": "portal.logging.NoClientErrorTraceback"},
    },
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s [%(request_id)s] %(message)s"},
        "json": {"()": "portal.logging.JsonFormatter"},
    },
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": os.environ.get("LOG_FORMAT", "plain"),
            "filters": ["request_id", "periodic_tasks", "no_client_error_traceback"],
        },
    },
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "INFO")},
    "loggers": {"django.db.backends": {"level": "WARNING"}},
}

# --- sign-in policy (portal/signin.py): the portal's and Django admin's forms alike ----------
# One backend: an address over its failure budget or a locked (account, address) pair gets
# no password checked at all (portal/auth.py).
AUTHENTICATION_BACKENDS = ["portal.auth.PortalModelBackend"]
# Lock out the (account, address) pair, never the account alone: a guesser cannot lock a
# user out from elsewhere. The address-only ceiling (portal.ratelimit.LOGIN_FAILURES) slows.
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_FAILURE_LIMIT = env_int("PORTAL_SIGNIN_FAILURE_LIMIT", 5)
AXES_COOLOFF_TIME = timedelta(minutes=env_int("PORTAL_SIGNIN_COOLOFF_MIN", 15))
AXES_RESET_ON_SUCCESS = True
# A sign-in refused unchecked (its pair locked out, or its address paced: portal.auth) is
# no failure: axes records nothing for it, so a right password is never counted as wrong.
AXES_RESET_COOL_OFF_ON_FAILURE_DURING_LOCKOUT = False
AXES_CLIENT_IP_CALLABLE = "portal.signin.axes_client_ip"
AXES_LOCKOUT_CALLABLE = "portal.signin.lockout_response"
AXES_VERBOSE = False  # its own log lines name accounts; the lockout is logged by Django
