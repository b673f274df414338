"""Every setting of the console, declared once, and the one loader that reads them.

A setting is a field of a section below declared with `setting(...)`: its default, its help, its
flag (--field-name unless named) and so its environment twin, BATCH_CONSOLE_<FLAG> (--tls-ca is
$BATCH_CONSOLE_TLS_CA). The CLI says which sections each command takes (`add_flags`); `load` then
builds a `Settings` from the flags given, else the environment, else the defaults, so a notebook
(`load()`) and every command read the same tree. The conversions the parts need sit here too:
`child_env` for the parts `up` starts, `spark_options` / `ConnectionSettings.from_options` for the
Spark data source. Secret settings never reach a repr, a log line or a command line.

Plain fields (no `setting`) are tuning knobs for code and tests, not for operators. A probe's
arguments (count, size, ...) describe one test run, not the console, and stay plain CLI arguments.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import secrets
import tempfile
import time
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Callable, Generic, Mapping, TypeVar

from console.domain.notify_targets import NotifyTargets
from console.domain.systems import (DEFAULT as DEFAULT_SYSTEM, Credentials, SystemSpec, SystemsError, domain_name,
                                    each_account, load_systems)
from console.errors import ConfigError, MissingKeyError

T = TypeVar("T")

ENV_PREFIX = "BATCH_CONSOLE_"
DEFAULT_SERVER = "nats://127.0.0.1:4222"
DAY = 86_400.0
EVENT_KEY_FILE = "event.key"
MIN_EVENT_KEY = 16  # characters
MIN_KEY_SYMBOLS = 6  # different characters: "aaaaaaaaaaaaaaaa" is no secret
SPARK_EVENT_KEY = "event_secret"  # the data source's option for the event key; Spark redacts "secret" keys
KEY_WAIT = 30.0  # seconds a reading part waits for the collector starting beside it to make the event key
# The analytics JVM's heap at most under up: the whole console stays under 2.5 GiB resident on one machine
# (README, "Memory and CPU"); a backlog of millions of events wants BATCH_CONSOLE_DRIVER_MEMORY=4g.
UP_DRIVER_MEMORY = "1500m"
SPARK_EVENT_SYSTEM = "event_system"  # the system whose log it reads (a systems file's): records signed for it
SPARK_KEY_SOURCE = "event_key_source"  # where that key came from, for the error a wrong key makes
TRUE, FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off", "")


@dataclass(frozen=True)
class Spec:
    help: str
    flag: str
    on_cli: bool = True  # False: read from the environment only
    secret: bool = False
    parse: Callable[[str], Any] = str
    many: bool = False  # repeatable, and comma separated (in a flag or the environment)
    switch: bool = False  # a flag without a value; 1/true/yes/on in the environment
    choices: tuple[str, ...] | None = None
    credential: str | None = None  # the kind named by ConnectionSettings.describe()

    @property
    def env(self) -> str:
        return ENV_PREFIX + self.flag.lstrip("-").replace("-", "_").upper()

    def read(self, text: str) -> Any:
        """A value from its text form (an environment variable, a Spark option)."""
        if self.switch:
            if text.strip().lower() not in TRUE + FALSE:
                raise ValueError("not one of 1/0, true/false, yes/no, on/off")
            return text.strip().lower() in TRUE
        if self.many:
            return tuple(self.parse(part.strip()) for part in text.split(",") if part.strip())
        value = self.parse(text)
        if self.choices and value not in self.choices:
            raise ValueError(f"not one of {', '.join(self.choices)}")
        return value

    def text(self, value: Any) -> str | None:
        """The inverse of read(); None for no value."""
        if value is None or (self.many and not value):
            return None
        if self.switch:
            return "1" if value else "0"
        if self.many:
            return ",".join(str(v) for v in value)
        return value.decode() if isinstance(value, bytes) else str(value)


def setting(default: Any, help: str, *, flag: str = "", env_only: bool = False, secret: bool = False,
            parse: Callable[[str], Any] = str, many: bool = False, switch: bool = False,
            choices: tuple[str, ...] | None = None, credential: str | None = None) -> Any:
    """A dataclass field that is also a flag and an environment variable. flag "" means --field-name."""
    spec = Spec(help, flag, not env_only, secret, parse, many, switch, choices, credential)
    return field(default=default, repr=not secret, metadata={"setting": spec})


def _spec(f: dataclasses.Field[Any]) -> Spec | None:
    spec = f.metadata.get("setting")
    if spec is not None and spec.flag == "":  # resolved lazily: the field's name is known only here
        spec = replace(spec, flag="--" + f.name.replace("_", "-"))
    return spec


def specs(section: type) -> list[tuple[str, Spec]]:
    return [(f.name, spec) for f in fields(section) if (spec := _spec(f)) is not None]


def env_name(section: type, name: str) -> str:
    return dict(specs(section))[name].env


def _url(text: str) -> str:
    return text.strip()


@dataclass(frozen=True)
class ConnectionSettings:
    """How to reach NATS. Credentials written into a server URL move to user/password or token."""

    servers: tuple[str, ...] = setting((DEFAULT_SERVER,), "NATS URL (repeat, or separate by commas, for a cluster)",
                                       flag="--server", many=True, parse=_url)
    creds: str | None = setting(None, "user credentials file (JWT + nkey seed)", credential="creds file")
    nkey: str | None = setting(None, "nkey seed file", credential="nkey")
    token: str | None = setting(None, "auth token", secret=True, credential="token")
    user: str | None = setting(None, "user name", credential="user/password")
    password: str | None = setting(None, "password", secret=True)
    tls_ca: str | None = setting(None, "CA certificate file", credential="TLS")
    tls_cert: str | None = setting(None, "client certificate file", credential="TLS")
    tls_key: str | None = setting(None, "client key file")
    monitor_url: str | None = setting(None, "the server's monitoring URL (http://host:8222), to learn its limits")
    connect_timeout: float = setting(5.0, "seconds to wait for a connection", parse=float)
    name: str = "batch-console"

    def __post_init__(self) -> None:
        clean, user, password, token = [], self.user, self.password, self.token
        for url in self.servers:
            bare, url_user, secret = split_userinfo(url)
            clean.append(bare)
            if url_user and secret:
                user, password = user or url_user, password or secret
            elif secret:
                token = token or secret
        for name, value in (("servers", tuple(clean)), ("user", user), ("password", password), ("token", token)):
            object.__setattr__(self, name, value)

    def describe(self) -> str:
        """A line safe to log: where we connect and which kinds of credential are in use."""
        kinds = dict.fromkeys(spec.credential for name, spec in specs(type(self))
                              if spec.credential and getattr(self, name))
        return f"{', '.join(self.servers)} ({', '.join(kinds) or 'no credentials'})"

    def options(self) -> dict[str, str]:
        """Every setting as a text option (the Spark data source's), by field name."""
        return {name: text for name, spec in specs(type(self)) if (text := spec.text(getattr(self, name))) is not None}

    @classmethod
    def from_options(cls, options: Mapping[str, str], name: str = "batch-console") -> ConnectionSettings:
        return cls(name=name, **{key: spec.read(options[key]) for key, spec in specs(cls) if options.get(key)})


@dataclass(frozen=True)
class SystemAccountSettings:
    """A system-account user: its copies of advisories are the ones no client can forge, and /varz."""

    system_creds: str | None = setting(None, "creds file of a system account user")
    system_user: str | None = setting(None, "system account user")
    system_password: str | None = setting(None, "its password", secret=True)

    def connection(self, base: ConnectionSettings) -> ConnectionSettings | None:
        if not (self.system_creds or self.system_user):
            return None
        return replace(base, name="batch-console-system", creds=self.system_creds, user=self.system_user,
                       password=self.system_password, token=None, nkey=None)


@dataclass(frozen=True)
class DataSettings:
    data_dir: Path = setting(Path("data"), "the event key, console.db, delta/, logs/ and the embedded server's "
                                           "store go here", parse=Path)
    mask_rules: Path | None = setting(None, "payload masking rules: a TOML file of [[mask]] streams, fields (JSON "
                                            "paths), headers; applied wherever a payload is shown or given out",
                                      parse=Path)
    no_payloads: bool = setting(False, "show and give out no payload at all (Search, Replay, the CLI, notebooks)",
                                switch=True)
    objectives: Path | None = setting(None, "loss budgets: a TOML file of [[objective]] name, streams (globs), "
                                            "publishers, lost_messages_per_million, lost_batches_per_thousand, "
                                            "window (28d)", parse=Path)
    decoders: Path | None = setting(None, "payload decoders: a TOML file of [[decoder]] streams, subjects, encoding "
                                          "(json, text, protobuf, avro, msgpack, cbor) and its schema files; a "
                                          "search's `payload` is each message as its decoder reads it", parse=Path)

    subdir: str = ""  # of a systems file's system: systems/NAME (Settings.of_system), its own console.db and delta/

    @property
    def system_dir(self) -> Path:
        """Where this system's own files are (console.db, delta/): the data directory, or of a systems file's
        system its subdirectory; the event key, the logs and the rules stay in the data directory."""
        return self.data_dir / self.subdir if self.subdir else self.data_dir

    @property
    def db_path(self) -> Path:
        """The SQLite database: the analytics tables and the alerts process's state."""
        return self.system_dir / "console.db"


@dataclass(frozen=True)
class EventLogSettings:
    """The event log in JetStream that the collector writes and every reader follows."""

    stream: str = setting("BATCH_CONSOLE_EVENTS", "the event log's stream", flag="--events-stream")
    max_age_days: float = setting(30.0, "days the event log keeps", flag="--events-max-age-days", parse=float)
    key_file: str | None = setting(None, "the key that signs the event log (default: $BATCH_CONSOLE_EVENT_KEY, "
                                         "else DATA_DIR/event.key, made when missing)", flag="--event-key-file")
    # The key itself: the collector signs with it, readers drop what it does not verify. None only
    # where nothing else can publish on the log's subjects (tests, embedding); see keyed().
    key: bytes | None = setting(None, "the event key itself", flag="--event-key", env_only=True, secret=True,
                                parse=str.encode)
    replicas: int | None = setting(None, "replicas of the console's streams (event log, advisories, quarantine) when "
                                         "it creates them; default: 3 on a cluster of three servers or more, else 1",
                                   parse=int)
    subject_prefix: str = "batch_console.events"
    # Long enough to cover a collector restart: a redelivered advisory must hit the same window.
    duplicate_window: float = 600.0
    append_timeout: float = 10.0
    key_source: str = ""  # where the key came from, for an error that says which key did not verify
    system: str | None = None  # a systems file's system whose log this is: its records are signed for it

    def keyed(self, data_dir: str | os.PathLike[str] | None, make: bool = True, wait: float = 0.0) -> EventLogSettings:
        """With the key resolved: key_file, else the key given, else DATA_DIR/event.key (made when
        missing, unless `make` is False: a reader that finds no key has no collector's to check with;
        it waits up to `wait` seconds for a collector starting beside it to make one)."""
        if self.key_file:
            source = f"--event-key-file {self.key_file}"
        elif self.key is not None or os.environ.get(EVENT_KEY_ENV):
            source = f"${EVENT_KEY_ENV}" if self.key is None else "the key given to the console"
        else:
            path = Path(data_dir or ".") / EVENT_KEY_FILE
            deadline = time.monotonic() + wait
            while not make and not path.exists() and time.monotonic() < deadline:
                time.sleep(0.2)  # at a process's start, before anything else runs
            if not make and not path.exists():
                raise MissingKeyError(f"no event key at {path.resolve()}: no collector has run on this data directory; "
                                  f"set {env_name(DataSettings, 'data_dir')} (or --data-dir) to the collector's, "
                                  "or give --event-key-file")
            source = f"{path.resolve()}"
        return replace(self, key=event_key(self.key_file, data_dir, self.key), key_source=source)

    @property
    def max_age(self) -> float:
        return self.max_age_days * DAY


@dataclass(frozen=True)
class CollectorSettings:
    inbox_prefixes: tuple[str, ...] = setting(("_INBOX",), "reply prefix to tap for fast batches", many=True,
                                              flag="--inbox-prefix")
    # The server's batch timeout: a fast batch silent longer is inferred dropped. None: learn it
    # from /varz (system account or monitor URL), else assume the server default.
    batch_timeout: float | None = setting(None, "the server's batch timeout (a fast batch silent longer is inferred "
                                                "dropped); default: learned from /varz, else 10", parse=float)
    tap_publish_subjects: tuple[str, ...] = setting((), "also tap batch messages published on these subjects "
                                                        "(as heavy as the data): atomic losses no advisory tells are "
                                                        "named, and a lost batch's first and last messages kept", flag="--tap-publish-side", many=True)
    domains: tuple[str, ...] = setting((), "JetStream domains of leaf nodes to capture advisories in too, each in a "
                                           "stream of its own there: a leaf cut off from these servers keeps its "
                                           "losses, read once it is back", flag="--domain", many=True, parse=domain_name)
    # The process's CPU priority (see console.collector.priority). None: left alone, for a
    # collector that shares its process with other work; `collect` defaults to adaptive.
    cpu: str | None = setting(None, "adaptive: nice 10, and Linux's idle class while the collector keeps up, so "
                                    "publishers on the same cores keep their speed; low: nice 10; normal: as any",
                              choices=("adaptive", "low", "normal"))
    # Milliseconds to pause between event-loop passes while tap traffic flows (0: off). Only for a
    # process of its own: the pause blocks the loop, so acks pile up and one read takes dozens of
    # them, instead of one wake-up per ack stealing CPU from the publishers being watched.
    pace_ms: float = setting(0.0, "pause between passes while tap traffic flows (0: off)", parse=float)

    @property
    def batch_timeout_or_default(self) -> float:
        """The batch timeout given, else the server's default (what is assumed until /varz tells it)."""
        from console.domain.batch_limits import DEFAULT_BATCH_TIMEOUT

        return self.batch_timeout or DEFAULT_BATCH_TIMEOUT
    no_conformance: bool = setting(False, "do not grade batch publishers against ADR-50 (the conformance report)",
                                   switch=True, flag="--no-conformance")
    quarantine_max_msgs: int = setting(10_000, "malformed inputs the quarantine stream keeps (the oldest go)", parse=int)
    quarantine_per_second: float = setting(50.0, "malformed inputs kept a second at most; the rest are only counted",
                                           parse=float)
    quarantine_first_per_reason: int = setting(20, "the first malformed inputs of each reason kept apart, in a stream "
                                                   "that never drops them", parse=int)
    quarantine_first_max_msgs: int = setting(2_000, "inputs the stream of first ones holds, then refuses more",
                                             parse=int)
    advisory_stream: str = "BATCH_CONSOLE_ADVISORIES"
    advisory_max_age: float = 7 * DAY
    durable: str = "batch-console-collector"
    status_every: float = 5.0
    tick_every: float = 0.5
    totals_every: float = 60.0  # seconds between two records of the streams' totals (loss budgets); 0: none
    fetch_batch: int = 256
    # What a crashed collector's fetched-but-unacked advisories wait before redelivery; storing a
    # fetched batch takes milliseconds, so this only bounds recovery time after a crash.
    ack_wait: float = 5.0
    max_tracked_batches: int = 10_000
    max_queued_events: int = 100_000


@dataclass(frozen=True)
class AnalyticsSettings:
    every: float = setting(60.0, "seconds between analytics runs (with --follow: between runs when no loss arrives; "
                                 "up's default 300)",
                           flag="--analytics-every", parse=float)
    follow: bool = setting(False, "run as soon as new events reach the event log (a warm session; the default "
                                  "under up)", switch=True)
    follow_gap: float = setting(10.0, "with --follow: seconds at least from one run's start to the next (History "
                                      "trails Live by about this plus a run)", parse=float)
    master: str | None = setting(None, "Spark master URL (default: spark-submit's, else local)", flag="--spark-master")
    # A Spark Connect URL may carry a token (sc://host:port/;token=...): never shown.
    remote: str | None = setting(None, "a Spark Connect server to run the job on, sc://HOST:PORT (instead of a "
                                       "master)", secret=True)
    partitions: int = setting(2, "parallel reads of the event log", parse=int)
    max_events: int = setting(100_000, "event-log sequences read per step of a run (bounds an executor's memory: "
                                       "a backlog is read step by step)", parse=int)
    driver_reads_up_to: int = setting(5_000, "a step of fewer event-log sequences is read by the job's own "
                                             "process, not by Spark's executors (0: always the executors)", parse=int)
    driver_memory: str = setting("4g", "the Spark driver's heap at most (local mode: it runs the tasks too; a backlog "
                                       "of millions of events wants 4g, a cluster's driver far less)")
    full_jit: bool = setting(False, "the Spark JVM compiles hot code with both JIT tiers (for a job that mostly works "
                                    "through a large backlog; each small run of a following job costs ~1.7x the CPU)",
                             switch=True)
    keep_workers: bool = setting(False, "a local session keeps every Python worker between runs (each ~120-190 MiB; "
                                        "small runs ~0.5-1 s faster); by default it keeps one", switch=True)


@dataclass(frozen=True)
class WebSettings:
    address: str = setting("127.0.0.1", "the web console's bind address")
    port: int = setting(8050, "the web console's port (0: a free one)", parse=int)
    basic_auth: str | None = setting(None, "a password, or a JSON file of user: password; required off loopback",
                                     secret=True)
    insecure: bool = setting(False, "serve off loopback without authentication", switch=True)
    read_only: bool = setting(False, "hide and refuse every action that changes the server", switch=True)
    mcp: bool = setting(False, "serve MCP (streamable HTTP) at /mcp beside the API, for the API's tokens", switch=True)
    mcp_writes: bool = setting(False, "with --mcp: the tools that change the server too (edit_stream, mute_rule, "
                                      "unmute_rule), each an audited action", switch=True)
    restart_command: str | None = setting(None, "the command that restarts a node ({node} is its name), so an admin "
                                                "can restart one from the Maintenance page (drained first, waited for "
                                                "after); never typed in the browser, never shown", secret=True)
    refusals_every: float = setting(60.0, "seconds over which refusals of callers without a valid token are counted "
                                          "into one audit record (the first of a quiet spell is written at once)",
                                    parse=lambda text: _bounded_seconds(text, 1.0, 3600.0))


def _bounded_seconds(text: str, least: float, most: float) -> float:
    value = float(text)
    if not least <= value <= most:  # also refuses nan and inf
        raise ValueError(f"seconds: from {least:g} to {most:g}")
    return value


def _minutes(text: str) -> float:
    value = float(text)
    if not 0 < value <= 31 * 24 * 60:  # also refuses nan and inf
        raise ValueError("minutes: more than 0, at most 31 days")
    return value


def _audience(text: str) -> str:
    if not 0 < len(text) <= 256 or not text.isprintable() or text != text.strip():
        raise ValueError("an audience: printable, at most 256 characters")
    return text


@dataclass(frozen=True)
class AccessSettings:
    """Who may do what: sign-in through an OpenID Connect provider, and roles over actions and streams."""

    oidc_issuer: str | None = setting(None, "sign in through this OpenID Connect provider (its issuer URL; "
                                            "discovery at /.well-known/openid-configuration), not a password",
                                      parse=_url)
    oidc_client_id: str | None = setting(None, "the console's client id at the provider")
    oidc_client_secret: str | None = setting(None, "the console's client secret at the provider", secret=True)
    oidc_scopes: tuple[str, ...] = setting(("openid", "profile", "email"), "the scopes asked for (add the one "
                                           "that brings the groups claim where the provider needs it: groups)",
                                           many=True)
    oidc_groups_claim: str = setting("groups", "the claim that lists the user's groups (ID token or userinfo)")
    oidc_user_claim: str = setting("preferred_username", "the claim shown as the user's name (else email, else sub)")
    oidc_api_audience: str | None = setting(None, "also take the provider's access tokens (RFC 9068 JWTs) on "
                                                  "/api/v1 and MCP, when issued for this audience (the API's "
                                                  "resource at the provider)", parse=_audience)
    session_minutes: float = setting(480.0, "minutes a signed-in session lasts; then the user signs in again and "
                                            "an open page may no longer act", parse=_minutes)
    roles: Path | None = setting(None, "roles and groups (TOML: [[role]] name, actions, streams, payloads, "
                                       "masked_payloads; [[group]] name, roles); default: viewer, operator, admin",
                                 parse=Path)
    local_role: str = setting("admin", "the role of whoever uses the console without the provider's groups: a "
                                       "password login, a loopback console without one, a notebook, the CLI")

    @property
    def oidc(self) -> bool:
        return self.oidc_issuer is not None


@dataclass(frozen=True)
class EmbeddedServerSettings:
    """The nats-server from the wheel, for `server` and for `up` without --server."""

    nats_host: str = setting("127.0.0.1", "the embedded nats-server's address")
    nats_port: int = setting(4222, "the embedded nats-server's port (0: a free one)", parse=int)
    nats_nodes: int = setting(1, "nodes of the embedded nats-server: 3 runs a cluster on loopback (client ports "
                                 "NATS_PORT, +1, +2), to watch batches across leader changes", flag="--nodes", parse=int)
    nats_batch_timeout: float | None = setting(None, "seconds an idle batch is kept (server default 10)", parse=float)
    nats_batch_max_msgs: int | None = setting(None, "atomic messages per batch (server default 1000)", parse=int)
    nats_sync: str = setting("always", "always: the embedded nats-server syncs every write to disk before it "
                                       "acknowledges (BATCH_025); default: nats-server's own, a flush every 2 minutes "
                                       "(faster writes, for seeding large streams)", choices=("always", "default"))


UP_PARTS_OPTIONAL = ("analytics", "alerts", "canary", "web")  # what `up --without` may leave out


def _up_part(text: str) -> str:
    name = text.strip()
    if name not in UP_PARTS_OPTIONAL:
        raise ValueError(f"not a part up can leave out: {text[:40]!r} (one of {', '.join(UP_PARTS_OPTIONAL)})")
    return name


@dataclass(frozen=True)
class DemoSettings:
    demo: bool = setting(False, "publish demo traffic on demo streams of its own (up)", switch=True)
    demo_every: float = setting(30.0, "seconds between demo rounds", parse=float)
    demo_rounds: int | None = setting(None, "stop after N demo rounds (default: until stopped)", parse=int)
    canary: bool = setting(False, "also run the canary as a part (up; on with --demo): an atomic and a fast batch "
                                  "through every node each minute, on streams of its own (batch-console canary)",
                           switch=True)
    without: tuple[str, ...] = setting((), "parts up does not start (analytics, alerts, canary, web; repeat or "
                                           "separate by commas): another process runs them, or they are not wanted",
                                       many=True, parse=_up_part)


@dataclass(frozen=True)
class AlertingSettings:
    rules: Path | None = setting(None, "alert rules (TOML); default: the shipped rules, one for every loss kind",
                                 parse=Path)
    metrics_port: int | None = setting(None, "serve Prometheus metrics on 127.0.0.1:PORT/metrics (0: a free port)",
                                       parse=int)
    console_url: str | None = setting(None, "the web console's URL, for links in notifications")
    webhook_hosts: tuple[str, ...] = setting((), "hosts a webhook may reach: names, addresses, networks (CIDR); a "
                                                 "loopback or private address only when listed, link-local never",
                                             many=True)
    notify_subjects: tuple[str, ...] = setting((), "subject prefixes a nats notify target may be under (never $JS, "
                                                   "$SYS, $KV, $O, inboxes or the console's own)", many=True)


@dataclass(frozen=True)
class FleetSettings:
    systems: Path | None = setting(None, "a systems file: every NATS system this console watches, each with its "
                                         "servers, credentials and accounts (TOML [[system]], see the README)",
                                   parse=Path)
    name: str = DEFAULT_SYSTEM  # the system these settings reach (Settings.of_system names it)


@dataclass(frozen=True)
class ChecksSettings:
    check_window: float = setting(60.0, "minutes of the event log the load checks count over", parse=float)
    check_every: float = setting(60.0, "seconds between two evaluations of the checks by the alerts part (its "
                                       "Checks page and /metrics)", parse=float)
    check_thresholds: tuple[str, ...] = setting((), "a check's threshold, CODE.name=value (BATCH_009.warning_at=5); "
                                                    "a stream's metadata batch_console.check.CODE.name wins for it",
                                                many=True)


@dataclass(frozen=True)
class LogSettings:
    verbose: bool = setting(False, "debug logging", switch=True)


@dataclass(frozen=True)
class Settings:
    """The whole tree. `given` names the settings set by a flag or the environment ("web.port")."""

    connection: ConnectionSettings = field(default_factory=ConnectionSettings)
    system: SystemAccountSettings = field(default_factory=SystemAccountSettings)
    data: DataSettings = field(default_factory=DataSettings)
    event_log: EventLogSettings = field(default_factory=EventLogSettings)
    collector: CollectorSettings = field(default_factory=CollectorSettings)
    analytics: AnalyticsSettings = field(default_factory=AnalyticsSettings)
    web: WebSettings = field(default_factory=WebSettings)
    access: AccessSettings = field(default_factory=AccessSettings)
    embedded: EmbeddedServerSettings = field(default_factory=EmbeddedServerSettings)
    demo: DemoSettings = field(default_factory=DemoSettings)
    alerting: AlertingSettings = field(default_factory=AlertingSettings)
    checks: ChecksSettings = field(default_factory=ChecksSettings)
    log: LogSettings = field(default_factory=LogSettings)
    fleet: FleetSettings = field(default_factory=FleetSettings)
    given: frozenset[str] = frozenset()

    def systems(self) -> tuple[SystemSpec, ...]:
        """The systems file's systems, each more account of a system as one of its own (SYSTEM/ACCOUNT;
        systems.each_account), ConfigError with its line; none without a file."""
        path = self.fleet.systems
        if path is None:
            return ()
        try:
            text = path.read_text()
        except (OSError, UnicodeDecodeError) as e:
            raise ConfigError(f"systems {path}: {e.__class__.__name__}: not readable") from None
        try:
            found = load_systems(text)
        except SystemsError as e:
            raise ConfigError(f"systems {path}: {e}") from None
        for spec in found:
            for key, named, line in spec.paths():
                if not Path(named).is_file():
                    raise ConfigError(f"systems {path}: line {line}: {key} of system {spec.name!r} is not a file")
        return each_account(found)

    def of_system(self, spec: SystemSpec) -> Settings:
        """These settings with one system's connection, system account and monitoring URL."""
        account, (ca, cert, key) = spec.credentials, spec.tls
        connection = replace(self.connection, servers=spec.servers, creds=account.creds, nkey=account.nkey,
                             user=account.user, password=account.password, token=account.token, tls_ca=ca,
                             tls_cert=cert, tls_key=key, monitor_url=spec.monitor_url)
        sys_account = spec.system_account or Credentials()
        system = SystemAccountSettings(sys_account.creds, sys_account.user, sys_account.password)
        named = {f"connection.{f.name}" for f in fields(ConnectionSettings)} | {f"system.{f.name}"
                                                                               for f in fields(SystemAccountSettings)}
        collector = replace(self.collector, domains=spec.domains) if spec.domains else self.collector
        return replace(self, connection=connection, system=system, fleet=replace(self.fleet, name=spec.name),
                       collector=collector,
                       data=replace(self.data, subdir=f"systems/{spec.name}"),
                       given=self.given | named)  # the file's, whatever a running `up` beside it chose

    def keyed_event_log(self, make: bool = True, wait: float = 0.0) -> EventLogSettings:
        """The event log's settings with the key; `make` for the collector, which makes a missing one. Of a
        systems file's system, with its name: its records are signed for it (console.domain.signing), and one
        signed for another system, copied into its log by a client of its account, is refused."""
        keyed = self.event_log.keyed(self.data.data_dir, make, wait)
        return keyed if self.fleet.name == DEFAULT_SYSTEM else replace(keyed, system=self.fleet.name)

    def notify_targets(self) -> NotifyTargets:
        """Where alerts may be sent: the allow-lists, and the console's own and reply subjects, never."""
        own = {self.event_log.subject_prefix.split(".")[0], "batch_console"}
        return NotifyTargets(self.alerting.webhook_hosts, self.alerting.notify_subjects, tuple(sorted(own)),
                             self.collector.inbox_prefixes)


SECTIONS: dict[str, type] = {f.name: f.type if isinstance(f.type, type) else globals()[f.type]
                             for f in fields(Settings) if f.name != "given"}
SECTION_TITLES = {"connection": "connection", "system": "system account (optional: its copies of advisories, /varz)",
                  "data": "data", "event_log": "event log", "collector": "collector", "analytics": "analytics job",
                  "web": "web console", "access": "access: sign-in (OpenID Connect) and roles",
                  "embedded": "embedded nats-server", "demo": "demo traffic", "alerting": "alerts",
                  "checks": "health checks", "log": "logging", "fleet": "several NATS systems"}


def add_flags(parser: argparse.ArgumentParser, *sections: str, aliases: Mapping[str, str] | None = None,
              defaults: Mapping[str, Any] | None = None) -> None:
    """The flags of the named sections ("web", or one setting: "demo.demo"), each also read from its
    environment twin. aliases: extra flag names ("--analytics-every": "--every"); defaults: a
    command's own defaults ("collector.cpu": "adaptive"), below its flags and environment."""
    aliases, defaults = aliases or {}, defaults or {}
    for wanted in sections:
        section, _, only = wanted.partition(".")
        group = parser.add_argument_group(SECTION_TITLES[section])
        for name, spec in specs(SECTIONS[section]):
            if (only and name != only) or not spec.on_cli:
                continue
            dest = f"{section}.{name}"
            names = [spec.flag] + ([aliases[spec.flag]] if spec.flag in aliases else [])
            default = defaults.get(dest, _default(SECTIONS[section], name))
            shown = "" if default in (None, (), False) or spec.secret else f"; default {spec.text(default)}"
            kwargs: dict[str, Any] = {"dest": dest, "default": argparse.SUPPRESS, "help": f"{spec.help} [${spec.env}{shown}]"}
            metavar = spec.flag.lstrip("-").replace("-", "_").upper()
            if spec.switch:
                kwargs["action"] = "store_true"
            elif spec.many:
                kwargs.update(action="append", type=_said(spec.read), metavar=metavar)
            else:
                kwargs.update(type=_said(spec.parse), choices=spec.choices, metavar=None if spec.choices else metavar)
            group.add_argument(*names, **kwargs)
    if defaults:
        parser.set_defaults(**{f"default:{k}": v for k, v in defaults.items()})


def _said(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """`parse`, its ValueError's reason said by argparse (which says only "invalid value" of a plain one)."""
    def said(text: str) -> Any:
        try:
            return parse(text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
    said.__name__ = getattr(parse, "__name__", "value")
    return said


def _default(section: type, name: str) -> Any:
    f = next(f for f in fields(section) if f.name == name)
    return f.default


def load(args: argparse.Namespace | None = None, environ: Mapping[str, str] | None = None) -> Settings:
    """The settings: a flag given, else its environment twin, else the command's default, else the
    declared one. With no args (a notebook), the environment and the defaults."""
    env = os.environ if environ is None else environ
    given_args = vars(args) if args is not None else {}
    sections, given = {}, set()
    for section, cls in SECTIONS.items():
        values = {}
        for name, spec in specs(cls):
            dest = f"{section}.{name}"
            if dest in given_args:
                value = given_args[dest]
                values[name] = tuple(v for part in value for v in part) if spec.many else value
            elif env.get(spec.env, "") != "":
                try:
                    values[name] = spec.read(env[spec.env])
                except (ValueError, TypeError) as e:
                    shown = "(secret)" if spec.secret else repr(env[spec.env])
                    raise ConfigError(f"${spec.env}={shown}: {e}") from None
            elif f"default:{dest}" in given_args:
                values[name] = given_args[f"default:{dest}"]
                continue
            else:
                continue
            given.add(dest)
        sections[section] = cls(**values)
    return Settings(**sections, given=frozenset(given))


class Watched(Generic[T]):
    """An operator's file as it is now: read at the first call, and again whenever it changes; a change
    with an error keeps what was read before, and `error` says why until the file is mended: a typo never
    takes away what worked. An error at the first call is the caller's (with its line), unless there is
    a `fallback` (a process that checked the file at its start, and met the error since)."""

    def __init__(self, path: Path | None, read: Callable[[], T], fallback: Callable[[], T] | None = None):
        self.path, self._read, self._fallback = path, read, fallback
        self._stamp: tuple[str, int, int] | None = None
        self._value: T | None = None
        self._read_once = False
        self.error: str | None = None

    def __call__(self) -> T:
        stamp = file_stamp(self.path)
        if not self._read_once or stamp != self._stamp:
            try:
                self._value, self.error = self._read(), None
            except ConfigError as e:
                if not self._read_once:
                    if self._fallback is None:
                        raise
                    self._value = self._fallback()
                if str(e) != self.error:
                    logging.getLogger(__name__).error("%s: the file as it was before is kept until it is mended", e)
                self.error = str(e)
            self._stamp, self._read_once = stamp, True
        return self._value  # type: ignore[return-value]  # read at least once by here


def file_stamp(path: Path | None) -> tuple[str, int, int] | None:
    """Which file, when it last changed and its size: what a process compares to read an operator's file
    again when it changes (None: no file, or none to be read)."""
    try:
        info = path.stat() if path is not None else None
    except OSError:
        return None
    return (str(path), info.st_mtime_ns, info.st_size) if info is not None else None


BESIDE_UP_DATA = ("mask_rules", "no_payloads", "objectives", "decoders")  # what a command beside `up` reads as up does


def data_settings_of(settings: Settings) -> dict[str, Any]:
    """The data settings `up` was given that a command beside it must read alike (files as absolute paths)."""
    found: dict[str, Any] = {}
    for name in BESIDE_UP_DATA:
        value = getattr(settings.data, name)
        if value is not None and value is not False:
            found[name] = str(Path(value).resolve()) if isinstance(value, Path) else value
    return found


def beside_up(settings: Settings) -> Settings:
    """The settings of a command run with the data directory of a running `up`: the NATS URL, the
    monitoring URL and the embedded server's system user that `up` chose, and the data settings it was given
    (decoders, masking rules, objectives: a search beside `up --decoders FILE` read no payload as up's did),
    each unless given."""
    up = running_up(settings.data.data_dir)
    if up is None:
        return settings
    found = up.get("data")
    given_data: dict[str, Any] = found if isinstance(found, dict) else {}
    changes: dict[str, Any] = {}
    for name in BESIDE_UP_DATA:
        value = given_data.get(name)
        if f"data.{name}" in settings.given or value is None:
            continue
        if name == "no_payloads" and type(value) is bool:
            changes[name] = value
        elif name != "no_payloads" and isinstance(value, str) and 0 < len(value) <= 4096 and "\x00" not in value:
            changes[name] = Path(value)
    settings = replace(settings, data=replace(settings.data, **changes))
    connection, system = settings.connection, settings.system
    if "connection.servers" not in settings.given and isinstance(up.get("nats"), str):
        connection = replace(connection, servers=(up["nats"],))
        if "connection.monitor_url" not in settings.given and isinstance(up.get("monitor"), str):
            connection = replace(connection, monitor_url=up["monitor"])
        if not (system.system_user or system.system_creds) and up.get("system_user") == EMBEDDED_SYSTEM_USER \
                and (password := embedded_system_password(settings.data.data_dir)) is not None:
            system = replace(system, system_user=EMBEDDED_SYSTEM_USER, system_password=password)
    return replace(settings, connection=connection, system=system)


def embedded_system_password(data_dir: Path) -> str | None:
    """The embedded server's system account user's password (`server` makes it once), or None."""
    try:
        return (data_dir / "nats" / SYSTEM_PASSWORD_FILE).read_text().strip()
    except OSError:
        return None


def running_up(data_dir: Path) -> dict[str, Any] | None:
    """What a running `up` on this data directory wrote of itself, or None (none, or it is gone)."""
    try:
        found = json.loads((data_dir / UP_FILE).read_text())
        pid = found["pid"]
        if not isinstance(pid, int) or pid <= 0:
            return None
        os.kill(pid, 0)
    except (OSError, ValueError, KeyError, TypeError):  # none, half written, not ours, or its up is gone
        return None
    return found if isinstance(found, dict) else None


def child_env(settings: Settings) -> dict[str, str]:
    """Every setting given or not at its default (a password lifted from a URL), as the environment
    of a child process: what `up` hands its parts, so no secret is on a command line, where `ps`
    shows it to every user."""
    env = {}
    for section, cls in SECTIONS.items():
        values = getattr(settings, section)
        for name, spec in specs(cls):
            value = getattr(values, name)
            wanted = f"{section}.{name}" in settings.given or value != _default(cls, name)
            if wanted and (text := spec.text(value)) is not None:
                env[spec.env] = text
    return env


def spark_options(settings: Settings) -> dict[str, str]:
    """The jetstream data source's options; Spark redacts password, token and secret values in its plans."""
    return {**settings.connection.options(), "stream": settings.event_log.stream,
            "partitions": str(settings.analytics.partitions),
            **_keyed_options(settings.keyed_event_log(make=False, wait=KEY_WAIT))}


def _keyed_options(event_log: EventLogSettings) -> dict[str, str]:
    return {SPARK_EVENT_KEY: (event_log.key or b"").decode(), SPARK_KEY_SOURCE: event_log.key_source,
            **({SPARK_EVENT_SYSTEM: event_log.system} if event_log.system else {})}


def split_userinfo(url: str) -> tuple[str, str | None, str | None]:
    """nats://user:secret@host -> (nats://host, user, secret); nats://token@host -> (nats://host, None, token)."""
    scheme, sep, rest = url.rpartition("://")
    authority, slash, path = rest.partition("/")
    if "@" not in authority:
        return url, None, None
    userinfo, host = authority.rsplit("@", 1)
    user, colon, secret = userinfo.partition(":")
    clean = f"{scheme}{sep}{host}{slash}{path}"
    return (clean, user or None, secret or None) if colon else (clean, None, userinfo or None)


def host_in_url(address: str) -> str:
    """An IPv6 address goes in brackets in a URL and a Host header."""
    return f"[{address}]" if ":" in address else address


EVENT_KEY_ENV = env_name(EventLogSettings, "key")


def event_key(key_file: str | os.PathLike[str] | None = None, data_dir: str | os.PathLike[str] | None = None,
              key: bytes | str | None = None, environ: Mapping[str, str] | None = None) -> bytes:
    """The console's event key: the file given, else the key given (or $BATCH_CONSOLE_EVENT_KEY),
    else DATA_DIR/event.key, made (readable by its owner only) when missing, so every part sharing a
    data directory shares the key. A key file others may read or write, or a key too plain to be
    secret, is refused (as ssh refuses such a private key). Its value is never logged."""
    env = os.environ if environ is None else environ
    key = key if key is not None else env.get(EVENT_KEY_ENV) or None
    if key_file:
        text = _read_key(Path(key_file))
    elif key:
        text = key.decode() if isinstance(key, bytes) else key
    elif data_dir is not None:
        text = _key_in(Path(data_dir))
    else:
        raise ConfigError(f"no event key: give --event-key-file, set {EVENT_KEY_ENV} or a data directory")
    text = text.strip()
    if len(text) < MIN_EVENT_KEY:
        raise ConfigError(f"the event key is shorter than {MIN_EVENT_KEY} characters")
    if len(set(text)) < MIN_KEY_SYMBOLS:
        raise ConfigError(f"the event key has fewer than {MIN_KEY_SYMBOLS} different characters: too plain to be "
                          f"secret (a new one: python3 -c 'import secrets; print(secrets.token_hex(32))')")
    return text.encode()


def open_to_others(path: Path) -> str | None:
    """How a secret file is open to others than its owner ("readable by others"), or None."""
    mode = path.stat().st_mode
    if mode & 0o022:
        return "writable by others"
    if mode & 0o044:
        return "readable by others"
    return None


def found_data_dir(settings: Settings, start: Path | None = None) -> Settings:
    """Where a data directory was not given: the first `data` holding an event key in the working
    directory or above it (a notebook runs in notebooks/, the console's data is beside it), else as set."""
    if "data.data_dir" in settings.given or settings.data.data_dir.is_absolute():
        return settings
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        candidate = folder / settings.data.data_dir
        if (candidate / EVENT_KEY_FILE).is_file():
            return replace(settings, data=replace(settings.data, data_dir=candidate))
    return settings


def private_dir(path: Path) -> Path:
    """`path` and any missing parent made for the owner alone (0700); a directory that exists is left as it is."""
    missing = [p for p in [path, *path.parents] if not p.exists()]
    for p in reversed(missing):
        try:
            p.mkdir(mode=0o700)
        except FileExistsError:  # another part made it first
            pass
    return path


SERVER_READY = "ready.json"  # in the embedded server's store: its URLs, written once it runs
UP_ANALYTICS_EVERY = 300.0  # up's analytics timer, following the log: a loss runs it at once, the rest waits
UP_FILE = "up.json"  # in the data directory: every URL a running `up` chose, for the commands run beside it
METRICS_FD_ENV = "BATCH_CONSOLE_METRICS_LISTENER_FD"  # the socket `up` listens on for its alerts part's /metrics
SYSTEM_PASSWORD_FILE = "system.password"  # in the embedded server's store: its system account user's (0600)
EMBEDDED_SYSTEM_USER = "system"


def private_file(path: Path) -> Path:
    """`path` made for its owner alone (0600) when missing, and made so when it is not (a log of a part
    can hold what no one else should read)."""
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600))
    os.chmod(path, 0o600)
    return path


def _read_key(path: Path) -> str:
    try:
        problem = open_to_others(path)
        text = path.read_text()
    except OSError as e:
        raise ConfigError(f"cannot read the event key file {path}: {e.strerror}") from None
    if problem:
        raise ConfigError(f"the event key file {path} is {problem}: chmod 600 {path}")
    return text


def _key_in(data_dir: Path) -> str:
    path = data_dir / EVENT_KEY_FILE
    if not path.exists():
        private_dir(data_dir)
        fd, temp = tempfile.mkstemp(dir=data_dir, prefix=".event-key-")  # mode 0600
        try:
            with os.fdopen(fd, "w") as f:
                f.write(secrets.token_hex(32) + "\n")
            os.link(temp, path)  # atomic: of two parts starting together, one key wins and both read it
        except FileExistsError:
            pass
        finally:
            os.unlink(temp)
    return _read_key(path)
