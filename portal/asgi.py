"""ASGI entry point: HTTP through Django, websockets through Channels.

The agents' heartbeat and desired-state reads take a shorter way in front of Django
(portal/api/agent/fastpath.py); everything else, errors on those included, is Django's.
"""

import gc
import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
django_asgi_app = get_asgi_application()

from portal.web.checks import require_static_manifest  # noqa: E402

require_static_manifest()  # DEBUG off without collectstatic: refuse to start, say why

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

from portal.api.agent.fastpath import AgentFastPath  # noqa: E402
from portal.realtime.routing import agent_websocket_urlpatterns, websocket_urlpatterns  # noqa: E402

application = ProtocolTypeRouter(
    {
        "http": AgentFastPath(django_asgi_app),
        "websocket": URLRouter([*agent_websocket_urlpatterns, *websocket_urlpatterns]),
    }
)

# Everything imported so far lives as long as the process: move it out of the cyclic
# collector's sight, so that full collections walk only what requests allocate, not all of
# Django; with thousands of agents reporting, those full collections show in the p99.
gc.freeze()
