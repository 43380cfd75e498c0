"""The message classes of proto/berth/v1 (see berth/_gen.py)."""

from berth import _gen

_gen.ensure()

from berth.v1 import admin_pb2, operate_pb2, push_pb2  # noqa: E402

__all__ = ["operate_pb2", "admin_pb2", "push_pb2"]
