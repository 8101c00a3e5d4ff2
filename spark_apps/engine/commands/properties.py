"""SET TBLPROPERTIES: change a table's properties in one commit, upgrading its protocol to the
features they ask for (after delta-spark's AlterTableSetPropertiesDeltaCommand).

The properties are checked as CREATE TABLE checks them (known ``delta.*`` keys, values that parse),
a feature this engine cannot write is refused, and the new configuration is the old one with these
keys set. When they ask for a feature the table lacks (``delta.enableDeletionVectors=true`` needs
``deletionVectors``; ``delta.feature.<name>=supported``), the protocol becomes a table-features one
listing what its legacy versions implied plus the new features (never a downgrade). Only the
metadata (and protocol) change: no data file is read or written, and a concurrent commit that
changes the metadata too conflicts, as in Delta.
"""

from __future__ import annotations

import dataclasses
import json

from .base import Command
from .result import CommandResult

__all__ = ["set_properties"]


def set_properties(snapshot, properties: dict, **txn_options) -> CommandResult:
    """Set ``properties`` on the snapshot's table (see the module docstring); the result's
    ``properties`` field holds what was set, ``protocol`` the protocol after the commit."""
    from .. import features
    from .create_table import stored_configuration, validate_properties

    given = validate_properties(properties)
    configuration = {**(snapshot.metadata.configuration or {}), **given}
    protocol = features.upgraded_protocol(snapshot.protocol, features.requested_features(configuration))
    configuration = stored_configuration(configuration, protocol)
    params = {"properties": json.dumps(given)}
    cmd = Command(snapshot, "SET TBLPROPERTIES", params, txn_options=txn_options)
    fields = {"properties": given, "protocol": protocol.to_json()}
    if cmd.duplicate:
        return cmd.skipped(None, fields=fields)
    if configuration == (snapshot.metadata.configuration or {}) and protocol == snapshot.protocol:
        return cmd.unchanged(None, fields=fields)
    cmd.txn.update_metadata(dataclasses.replace(snapshot.metadata, configuration=configuration))
    if protocol != snapshot.protocol:
        cmd.txn.update_protocol(protocol)
    return cmd.commit([], None, fields=fields)
