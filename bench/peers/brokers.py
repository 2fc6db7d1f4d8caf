"""Other brokers for a comparison run: RabbitMQ and ActiveMQ from Debian's packages.

bench/run_node.py runs the Node generator against mqgate and against these, one after
the other, on the same ports, so that a ratio is measured in one run on one machine.
Each peer is started here as a child process in a session of its own, on loopback,
with its configuration and data in a temporary directory (never the system's
/etc/rabbitmq or /var/lib/activemq, and never its system service), and the whole
session is killed when the comparison ends, however it ends::

    with RabbitMQ(workdir, amqp_port=5672, stomp_port=61613) as peer:
        ...  # peer.amqp_url, peer.stomp_url, peer.generator_args

The configuration files are bench/peers/rabbitmq.conf and bench/peers/activemq.xml,
with their placeholders filled in by L{render_rabbitmq_conf} and L{render_activemq_xml}.
``make bench BROKER=...`` installs the packages (`make peer-brokers`); nothing else does.
"""

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path
from string import Template
from xml.sax.saxutils import quoteattr

PEERS_DIR = Path(__file__).resolve().parent

#: Seconds a peer may take to listen on both ports (the JVM and the Erlang VM start
#: slowly on a loaded 2-core machine), and to stop after SIGTERM before it is killed.
START_TIMEOUT = 120
STOP_TIMEOUT = 20

RABBITMQ_SERVER = "/usr/lib/rabbitmq/bin/rabbitmq-server"
ACTIVEMQ_HOME = Path("/usr/share/activemq")
#: The jar that holds ActiveMQ's AMQP transport; Debian's package (5.17) leaves it out.
ACTIVEMQ_AMQP_JAR = "activemq-amqp.jar"


class PeerError(Exception):
    """A peer broker is missing, did not start, or stopped by itself."""


def render_rabbitmq_conf(amqp_port, stomp_port, user, password):
    """bench/peers/rabbitmq.conf with the ports and the benchmark's user filled in."""
    for value in (user, password):
        if not value or any(c.isspace() for c in value):
            raise PeerError(f"RabbitMQ's user and password must be non-empty without spaces: {value!r}")
    text = (PEERS_DIR / "rabbitmq.conf").read_text(encoding="utf-8")
    return Template(text).substitute(amqp_port=amqp_port, stomp_port=stomp_port,
                                     user=user, password=password)


def render_activemq_xml(data_dir, stomp_port, user, password, amqp_port=None):
    """bench/peers/activemq.xml for a data directory; AMQP only when C{amqp_port}."""
    amqp = ""
    if amqp_port is not None:
        amqp = ('\n      <transportConnector name="amqp" uri="amqp://127.0.0.1:%d"/>'
                % amqp_port)
    text = (PEERS_DIR / "activemq.xml").read_text(encoding="utf-8")
    return Template(text).substitute(data_dir=str(data_dir), stomp_port=stomp_port,
                                     user=quoteattr(user), password=quoteattr(password),
                                     amqp_connector=amqp)


def free_port():
    """A loopback port nothing listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def port_in_use(port):
    with socket.socket() as probe:
        probe.settimeout(1)
        return probe.connect_ex(("127.0.0.1", port)) == 0


class Peer:
    """One peer broker in a temporary directory: start, wait for its ports, stop.

    Subclasses say what they are (C{name}, C{package}), whether they are installed
    (C{problem}), which protocols they serve here (C{protocols}), and how they are
    started (C{_launch}).
    """

    name = package = None
    #: Options of bench/node/bench.js this broker needs (address prefixes).
    generator_args = ()

    def __init__(self, workdir, amqp_port, stomp_port, user="guest", password="guest"):
        self.workdir = Path(workdir)
        self.amqp_port, self.stomp_port = amqp_port, stomp_port
        self.user, self.password = user, password
        self.processes = []
        self.log = self.workdir / "output.log"

    @classmethod
    def problem(cls):
        """Why this broker cannot run here, or None."""
        raise NotImplementedError

    @property
    def protocols(self):
        return ("amqp", "stomp")

    @property
    def note(self):
        """What the output should say about this peer (a protocol it lacks), or None."""
        return None

    @property
    def amqp_url(self):
        return "amqp://127.0.0.1:%d" % self.amqp_port

    @property
    def stomp_url(self):
        return "stomp://127.0.0.1:%d" % self.stomp_port

    def _spawn(self, argv, env=None):
        """Start a child in a session of its own (so that stop() reaches its children)."""
        out = self.log.open("ab")
        try:
            process = subprocess.Popen(argv, cwd=str(self.workdir), env=env, stdin=subprocess.DEVNULL,
                                       stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        finally:
            out.close()
        self.processes.append(process)
        return process

    def _launch(self):
        raise NotImplementedError

    def start(self):
        problem = self.problem()
        if problem:
            raise PeerError(problem)
        ports = [self.stomp_port] + ([self.amqp_port] if "amqp" in self.protocols else [])
        busy = [port for port in ports if port_in_use(port)]
        if busy:
            raise PeerError(f"{self.name}: port {busy[0]} on 127.0.0.1 is already in use; stop "
                            "whatever listens there or choose other ports (--amqp-port, --stomp-port)")
        self.workdir.mkdir(parents=True, exist_ok=True)
        try:
            self._launch()
            self._wait_listening(ports)
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_listening(self, ports):
        deadline = time.monotonic() + START_TIMEOUT
        waiting = list(ports)
        while waiting:
            for process in self.processes:
                if process.poll() is not None:
                    raise PeerError(f"{self.name} exited with code {process.returncode} before "
                                    f"it listened on port {waiting[0]}:\n{self.output_tail()}")
            if time.monotonic() > deadline:
                raise PeerError(f"{self.name} did not listen on port {waiting[0]} within "
                                f"{START_TIMEOUT} s:\n{self.output_tail()}")
            if port_in_use(waiting[0]):
                waiting.pop(0)
            else:
                time.sleep(0.25)

    def output_tail(self, lines=20):
        try:
            text = self.log.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return "(no output)"
        return "\n".join(text.splitlines()[-lines:])

    def stop(self):
        """SIGTERM every process group started here, then SIGKILL what is left."""
        for process in reversed(self.processes):
            _signal_group(process, signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT
        for process in reversed(self.processes):
            try:
                process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            # The group may hold children of the leader (the Erlang VM under the
            # rabbitmq-server script): kill the group even when the leader is gone.
            _signal_group(process, signal.SIGKILL)
            try:
                process.wait(5)
            except subprocess.TimeoutExpired:
                pass
        self.processes = []

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
        return False


def _signal_group(process, signum):
    try:
        os.killpg(process.pid, signum)
    except (ProcessLookupError, PermissionError):
        pass


class RabbitMQ(Peer):
    """RabbitMQ 3.10 (Debian's rabbitmq-server) with its AMQP 1.0 and STOMP plugins.

    It runs as a node of its own (bench@localhost) with its own epmd on a free port,
    so that neither meets a RabbitMQ or an epmd the machine already runs. Its AMQP 1.0
    plugin routes a bare address to no queue: queues are /queue/NAME and topics
    /topic/NAME (through amq.topic), which the generator is told with its prefixes;
    its STOMP plugin takes the CONNECT frame's host header as the virtual host, "/".
    """

    name = "rabbitmq"
    package = "rabbitmq-server"
    generator_args = ("--amqp-queue-prefix", "/queue/", "--amqp-topic-prefix", "/topic/",
                      "--stomp-host", "/")

    @classmethod
    def problem(cls):
        if not os.access(RABBITMQ_SERVER, os.X_OK):
            return ("RabbitMQ is not installed (no %s): install Debian's rabbitmq-server, "
                    "or run make bench BROKER=rabbitmq as root, which does" % RABBITMQ_SERVER)
        if shutil.which("epmd") is None:
            return "RabbitMQ's epmd is missing (Debian package erlang-base)"
        return None

    def _launch(self):
        home = self.workdir / "home"      # the Erlang cookie goes here
        home.mkdir(exist_ok=True)
        conf = self.workdir / "rabbitmq.conf"
        conf.write_text(render_rabbitmq_conf(self.amqp_port, self.stomp_port,
                                             self.user, self.password), encoding="utf-8")
        plugins = self.workdir / "enabled_plugins"
        plugins.write_text("[rabbitmq_amqp1_0,rabbitmq_stomp].\n", encoding="utf-8")
        epmd_port = free_port()
        env = dict(os.environ, HOME=str(home), ERL_EPMD_PORT=str(epmd_port),
                   ERL_EPMD_ADDRESS="127.0.0.1")
        self._spawn(["epmd", "-port", str(epmd_port), "-address", "127.0.0.1"], env)
        env.update(
            RABBITMQ_CONF_ENV_FILE=os.devnull,           # not /etc/rabbitmq/rabbitmq-env.conf
            RABBITMQ_NODENAME="bench@localhost",
            RABBITMQ_CONFIG_FILE=str(conf),
            RABBITMQ_ADVANCED_CONFIG_FILE=str(self.workdir / "advanced.config"),
            RABBITMQ_ENABLED_PLUGINS_FILE=str(plugins),
            RABBITMQ_MNESIA_BASE=str(self.workdir / "mnesia"),
            RABBITMQ_LOG_BASE=str(self.workdir / "log"),
            RABBITMQ_PID_FILE=str(self.workdir / "rabbitmq.pid"),
            RABBITMQ_DIST_PORT=str(free_port()),
            RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}",
        )
        self._spawn([RABBITMQ_SERVER], env)
        #: The environment rabbitmqctl needs to reach this node (its epmd and cookie).
        self.environment = env


class ActiveMQ(Peer):
    """ActiveMQ 5.17 (Debian's activemq), STOMP always, AMQP when its module is there.

    Started as the package's own script starts it (java -jar bin/activemq.jar start
    xbean:...), with 512 MiB of heap like the package's default instance, but on a
    configuration and data directory of its own.
    """

    name = "activemq"
    package = "activemq"

    @classmethod
    def problem(cls):
        if not (ACTIVEMQ_HOME / "bin" / "activemq.jar").is_file():
            return ("ActiveMQ is not installed (no %s/bin/activemq.jar): install Debian's "
                    "activemq, or run make bench BROKER=activemq as root, which does"
                    % ACTIVEMQ_HOME)
        if shutil.which("java") is None:
            return "ActiveMQ needs java (Debian package default-jre-headless)"
        return None

    @staticmethod
    def has_amqp():
        return (ACTIVEMQ_HOME / "lib" / ACTIVEMQ_AMQP_JAR).is_file()

    @property
    def protocols(self):
        return ("amqp", "stomp") if self.has_amqp() else ("stomp",)

    @property
    def note(self):
        if self.has_amqp():
            return None
        return ("this ActiveMQ installation has no AMQP module (%s/lib/%s; Debian's package "
                "leaves it out): its AMQP scenarios are skipped, STOMP only"
                % (ACTIVEMQ_HOME, ACTIVEMQ_AMQP_JAR))

    def _launch(self):
        conf_dir, data_dir, tmp_dir = (self.workdir / name for name in ("conf", "data", "tmp"))
        for path in (conf_dir, data_dir, tmp_dir):
            path.mkdir(exist_ok=True)
        amqp_port = self.amqp_port if self.has_amqp() else None
        xml = conf_dir / "activemq.xml"
        xml.write_text(render_activemq_xml(data_dir, self.stomp_port, self.user,
                                           self.password, amqp_port), encoding="utf-8")
        self._spawn(["java", "-Xms512M", "-Xmx512M",
                     "-Dactivemq.home=%s" % ACTIVEMQ_HOME, "-Dactivemq.base=%s" % self.workdir,
                     "-Dactivemq.conf=%s" % conf_dir, "-Dactivemq.data=%s" % data_dir,
                     "-Djava.io.tmpdir=%s" % tmp_dir,
                     "-jar", str(ACTIVEMQ_HOME / "bin" / "activemq.jar"),
                     "start", "xbean:file:%s" % xml])


PEERS = {peer.name: peer for peer in (RabbitMQ, ActiveMQ)}
