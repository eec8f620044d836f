from django.contrib import admin

from domains.tenancy.models import ApiToken, Membership, Namespace, Quota


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0
    raw_id_fields = ["user"]


class QuotaInline(admin.StackedInline):
    model = Quota
    can_delete = False


@admin.register(Namespace)
class NamespaceAdmin(admin.ModelAdmin):
    list_display = ["name", "display_name", "source", "active", "created_at"]
    list_filter = ["source", "active"]
    search_fields = ["name", "display_name"]
    inlines = [QuotaInline, MembershipInline]


@admin.register(Membership)
class MembershipAdmin(admin.ModelAdmin):
    list_display = ["user", "namespace", "role"]
    list_filter = ["role", "namespace"]
    list_select_related = ["user", "namespace"]


@admin.register(Quota)
class QuotaAdmin(admin.ModelAdmin):
    list_display = ["namespace", "max_gpus", "max_nodes", "max_domains", "max_nodes_per_domain"]
    list_select_related = ["namespace"]


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = ["user", "name", "prefix", "read_only", "expires_at", "last_used_at"]
    list_select_related = ["user"]
    exclude = ["token_hash"]
    readonly_fields = ["prefix", "last_used_at"]
