"""Write bodies hold only the fields they document: anything else is a 400 naming it.

DRF drops members it does not know, so ``PATCH /limits/3 {"rtae": 7}`` answered
200, changed nothing, and still bumped the revision and wrote an audit entry.
Read-only fields (``id``, ``revision``...) are accepted and ignored, so a body
read with GET can be sent back whole.
"""

from collections.abc import Mapping

from rest_framework import serializers

__all__ = ["StrictModelSerializer", "StrictSerializer"]


class StrictFieldsMixin:
    # Refuses members of the body that are not fields of the serializer. (No docstring:
    # the schema would show it as the description of every serializer without one.)

    def to_internal_value(self, data):
        if isinstance(data, Mapping):
            unknown = sorted(str(name) for name in data if name not in self.fields)
            if unknown:
                raise serializers.ValidationError(
                    {name: ["Unknown field."] for name in unknown}
                )
        return super().to_internal_value(data)


class StrictSerializer(StrictFieldsMixin, serializers.Serializer):
    pass


class StrictModelSerializer(StrictFieldsMixin, serializers.ModelSerializer):
    pass
