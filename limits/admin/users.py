"""Django's user pages, with deletions that go through ``limits.gateways.users``
(audited as the person who deletes; their API tokens revoked, not deleted)."""

from django.contrib import admin
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import UserAdmin

from limits.core.audit import Actor
from limits.gateways.users import user_delete

User = get_user_model()


class SluiceUserAdmin(UserAdmin):
    def delete_model(self, request, obj):
        user_delete(user=obj, actor=Actor.from_request(request))

    def delete_queryset(self, request, queryset):
        actor = Actor.from_request(request)
        for user in queryset:
            user_delete(user=user, actor=actor)


if admin.site.is_registered(User):
    admin.site.unregister(User)
admin.site.register(User, SluiceUserAdmin)
