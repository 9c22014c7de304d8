"""Input written to hurt the control plane, shared by the tests that refuse it."""

from __future__ import annotations

__all__ = ["BILLION_LAUGHS"]

# 352 bytes of YAML whose aliases expand to 9**9 (387 million) strings: loading it
# the plain way costs seconds and hundreds of megabytes, ten times more per line.
BILLION_LAUGHS = """format: 1
a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
"""
