"""The roles file as it is now: read at the start (an error stops the process, with its line) and again
whenever it changes; a change with an error gives no one any role until it is mended (said in the
log): a typo never leaves a removed user their access."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from console.config import AccessSettings, file_stamp
from console.errors import ConfigError

if TYPE_CHECKING:
    from console.domain.roles import RolesFile

log = logging.getLogger(__name__)


class RolesWatch:
    def __init__(self, access: AccessSettings):
        self.access = access
        self._roles: RolesFile | None = None
        self._stamp: tuple[str, int, int] | None = None

    def __call__(self) -> RolesFile:
        stamp = file_stamp(self.access.roles)
        if self._roles is None or stamp != self._stamp:
            try:
                self._roles = self._read()
            except ConfigError as e:
                if self._roles is None:
                    raise
                from console.domain.roles import RolesFile

                log.error("%s: no one has a role until it is mended", e)
                self._roles = RolesFile({}, {})
            self._stamp = stamp
        return self._roles

    def _read(self) -> RolesFile:
        from console.commands import LEAST_ROLE
        from console.domain.roles import load_roles

        access = self.access
        try:
            roles = load_roles(access.roles.read_text() if access.roles else "", LEAST_ROLE)
        except (OSError, ValueError) as e:
            raise ConfigError(f"roles {access.roles}: {e}") from None
        if access.local_role not in roles.roles:
            raise ConfigError(f"the local role {access.local_role[:64]!r} is not a role "
                              f"({', '.join(sorted(roles.roles))[:200]})")
        return roles
