"""Who may open which page. Every view goes through one of these, so none can forget.

Audience pages (operator, admin) refuse the wrong role with 403. Namespace pages answer
404 to anyone who may not see the namespace, so a tenant cannot even learn that another
namespace exists.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest
from django.http.response import HttpResponseBase
from django.shortcuts import get_object_or_404

from domains.computedomains.models import ComputeDomain
from domains.computedomains.selectors import domains_visible_to
from domains.tenancy.models import Namespace
from domains.tenancy.selectors import can_request_in, can_view_namespace, is_admin, is_operator

View = Callable[..., HttpResponseBase]


class SignedInRequest(HttpRequest):
    """What the decorators below (and `login_required`) hand a view: a request whose user
    is signed in. For the type checker only; at run time it is the same HttpRequest."""

    user: User


def operator_required(view: View) -> View:
    @login_required
    @wraps(view)
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        if not is_operator(request.user):
            raise PermissionDenied("operators only")
        return view(request, *args, **kwargs)

    return wrapped


def admin_required(view: View) -> View:
    @login_required
    @wraps(view)
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        if not is_admin(request.user):
            raise PermissionDenied("portal admins only")
        return view(request, *args, **kwargs)

    return wrapped


def visible_namespace(request: HttpRequest, name: str) -> Namespace:
    """The namespace if this user may see it; 404 otherwise (also for ones that exist)."""
    namespace = Namespace.objects.filter(name=name).first()
    if namespace is None or not can_view_namespace(request.user, namespace):
        raise Http404("no such namespace")
    return namespace


def requestable_namespace(request: HttpRequest, name: str) -> Namespace:
    """As `visible_namespace`, and the user may request/release domains in it (403 if not)."""
    namespace = visible_namespace(request, name)
    if not can_request_in(request.user, namespace):
        raise PermissionDenied("viewers cannot change domains in this namespace")
    return namespace


def visible_domain(request: HttpRequest, namespace: Namespace, uid: Any) -> ComputeDomain:
    """A domain of this namespace that the user may see; 404 otherwise."""
    return get_object_or_404(domains_visible_to(request.user), namespace=namespace, uid=uid)
