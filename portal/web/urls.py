"""Web UI pages, per audience."""

from django.contrib.auth import views as auth_views
from django.urls import path

from portal.web import views

urlpatterns = [
    path("login/", auth_views.LoginView.as_view(template_name="auth/login.html"), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("", views.home, name="home"),
]
