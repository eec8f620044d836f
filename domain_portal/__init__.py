# SPDX-License-Identifier: Apache-2.0
"""Domain Portal's version, written here and nowhere else.

A package of its own, standard library only, so that the portal, the node agent (which
must not import Django) and the build (pyproject's dynamic version) all read the same
string. Bump it when a release is cut and move CHANGELOG.md's Unreleased section under it.
"""

__version__ = "0.1.0"
