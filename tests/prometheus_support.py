"""A real Prometheus (Debian's prometheus) serving series a test writes: the series are
backfilled into its TSDB with promtool (`tsdb create-blocks-from openmetrics`) before it
starts, so every answer comes from the real query engine (lookback, range steps, errors), and
its query log (`query_log_file`) shows what went over the wire."""
from __future__ import annotations

import json
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

from fleet_lab.chatops import procs

PROMETHEUS = "/usr/bin/prometheus"
PROMTOOL = "/usr/bin/promtool"


class BackfilledPrometheus:
    """Series added with add(); the server starts on the first use of `url`."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.series: List[Tuple[Dict[str, str], List[Tuple[float, float]]]] = []
        self.pid: Optional[int] = None
        self._url = ""

    def add(self, labels: Dict[str, str], func: Callable[[float], float], start: float,
            end: float, every: float = 15.0) -> None:
        """A series with `labels` (`__name__` its metric), func(t) sampled every `every` s."""
        samples, t = [], start
        while t <= end:
            samples.append((t, float(func(t))))
            t += every
        self.series.append((dict(labels), samples))

    @property
    def url(self) -> str:
        if not self._url:
            self._start()
        return self._url

    def _openmetrics(self) -> str:
        families: Dict[str, List[str]] = {}
        for labels, samples in self.series:
            name = labels["__name__"]
            rest = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()) if k != "__name__")
            lines = families.setdefault(name, [])
            lines.extend(f"{name}{{{rest}}} {value!r} {t:.3f}" for t, value in samples)
        return "".join("\n".join(lines) + "\n" for lines in families.values()) + "# EOF\n"

    def _start(self) -> None:
        data = self.dir / "data"
        data.mkdir(parents=True, exist_ok=True)
        source = self.dir / "series.om"
        source.write_text(self._openmetrics())
        if self.series:
            made = subprocess.run([PROMTOOL, "tsdb", "create-blocks-from", "openmetrics",
                                   str(source), str(data)], capture_output=True, text=True,
                                  timeout=300)
            assert made.returncode == 0, made.stderr[-2000:]
        config = self.dir / "prometheus.yml"
        config.write_text(json.dumps({"global": {"query_log_file": str(self.queries_path)},
                                      "scrape_configs": []}))
        port = procs.free_port()
        self.pid = procs.spawn([PROMETHEUS, f"--config.file={config}",
                                f"--storage.tsdb.path={data}",
                                f"--web.listen-address=127.0.0.1:{port}",
                                "--storage.tsdb.retention.time=100y", "--log.level=warn"],
                               self.dir / "prometheus.log")
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                pass
            assert procs.alive(self.pid), procs.tail(self.dir / "prometheus.log")
            assert time.monotonic() < deadline, "prometheus not ready within 60 s"
            time.sleep(0.1)
        self._url = url

    @property
    def queries_path(self) -> Path:
        return self.dir / "queries.log"

    def queries(self) -> List[Dict[str, Any]]:
        """The query log: one entry per query the server ran (params, httpRequest)."""
        try:
            text = self.queries_path.read_text()
        except OSError:
            return []
        return [json.loads(line) for line in text.splitlines() if line.strip()]

    def stop(self) -> None:
        if self.pid is not None:
            procs.stop(self.pid, 15.0)
            self.pid = None
