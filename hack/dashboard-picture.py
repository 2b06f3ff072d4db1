#!/usr/bin/env python3
"""Draws a Grafana dashboard's panels from a real Prometheus (hack/dashboard-picture.sh).

Each panel's own expressions are evaluated through Prometheus' HTTP API (`query_range` for time
series, `query` for stat and table panels) with the dashboard's variables set to "all", and the
panels are laid out on Grafana's 24-column grid at their gridPos.
"""

import argparse
import json
import time
import urllib.parse
import urllib.request

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

UNITS = {"percentunit": (100.0, "%"), "s": (1000.0, " ms"), "reqps": (1.0, "/s")}


def query(base, path, params):
    url = f"{base}/api/v1/{path}?{urllib.parse.urlencode(params)}"
    with urllib.request.urlopen(url, timeout=30) as response:
        body = json.load(response)
    if body.get("status") != "success":
        raise SystemExit(f"prometheus: {path} {params}: {body}")
    return body["data"]["result"]


def expand(expr):
    # Every variable at "all": the task regex matches every task.
    return expr.replace("$task", ".*").replace("${task}", ".*")


def legend(fmt, labels):
    if not fmt:
        return ",".join(f"{k}={v}" for k, v in sorted(labels.items()) if k not in ("job", "instance")) or "value"
    out = fmt
    for key, value in labels.items():
        out = out.replace("{{" + key + "}}", value or '""')
    return out


def scaled(value, unit):
    factor, suffix = UNITS.get(unit, (1.0, ""))
    return value * factor, suffix


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--prometheus", required=True)
    p.add_argument("--dashboard", required=True)
    p.add_argument("--minutes", type=float, default=5)
    p.add_argument("--out", required=True)
    a = p.parse_args()
    dash = json.load(open(a.dashboard))
    end = time.time()
    start = end - a.minutes * 60
    panels = dash["panels"]
    # Two grid rows on top for the title.
    head = 2
    rows = max(x["gridPos"]["y"] + x["gridPos"]["h"] for x in panels) + head
    # One grid unit: 1/24 of the width across, 30 px high in Grafana.
    width, unit_h = 24.0, 0.42
    fig = plt.figure(figsize=(width, rows * unit_h))
    fig.patch.set_facecolor("#111217")
    fig.suptitle(f"{dash['title']} — from a simulated cluster's real metrics (last {a.minutes:g} min)",
                 color="white", fontsize=16, y=1 - 0.35 / (rows * unit_h))
    for panel in panels:
        g = panel["gridPos"]
        left, w = g["x"] / 24, g["w"] / 24
        top, h = (g["y"] + head) / rows, g["h"] / rows
        rect = [left + 0.004, 1 - top - h + 0.012, w - 0.008, h - 0.024]
        if panel["type"] == "row":
            fig.text(left + 0.005, 1 - top - h / 2, panel["title"], color="#ccccdc", fontsize=13, weight="bold",
                     va="center")
            continue
        ax = fig.add_axes(rect)
        ax.set_facecolor("#181b1f")
        for spine in ax.spines.values():
            spine.set_color("#2c3235")
        ax.set_title(panel["title"], color="#ccccdc", fontsize=10, loc="left")
        ax.tick_params(colors="#8e8e8e", labelsize=7)
        unit = panel.get("fieldConfig", {}).get("defaults", {}).get("unit", "short")
        targets = panel.get("targets", [])
        if panel["type"] == "timeseries":
            drawn = 0
            for t in targets:
                step = max(5, int(a.minutes * 60 / 120))
                for series in query(a.prometheus, "query_range",
                                    {"query": expand(t["expr"]), "start": start, "end": end, "step": step}):
                    xs = [(float(ts) - start) / 60 for ts, _ in series["values"]]
                    ys = [scaled(float(v), unit)[0] for _, v in series["values"]]
                    ax.plot(xs, ys, linewidth=1.2, label=legend(t.get("legendFormat", ""), series["metric"]))
                    drawn += 1
            ax.set_xlabel("minutes", color="#8e8e8e", fontsize=7)
            suffix = scaled(1, unit)[1].strip()
            if suffix:
                ax.set_ylabel(suffix, color="#8e8e8e", fontsize=7)
            if drawn:
                ax.legend(fontsize=6, loc="upper left", facecolor="#181b1f", labelcolor="#ccccdc",
                          edgecolor="#2c3235", ncol=2)
            else:
                ax.text(0.5, 0.5, "No data", color="#8e8e8e", ha="center", va="center", transform=ax.transAxes)
        else:
            ax.set_xticks([])
            ax.set_yticks([])
            lines = []
            for t in targets:
                for series in query(a.prometheus, "query", {"query": expand(t["expr"]), "time": end}):
                    value, suffix = scaled(float(series["value"][1]), unit)
                    lines.append((legend(t.get("legendFormat", ""), series["metric"]), f"{value:.3g}{suffix}"))
            if not lines:
                ax.text(0.5, 0.5, "No data", color="#8e8e8e", ha="center", va="center", transform=ax.transAxes)
            elif panel["type"] == "stat" and len(lines) <= 4:
                for i, (name, value) in enumerate(lines):
                    x = (i + 0.5) / len(lines)
                    ax.text(x, 0.55, value, color="#73bf69", fontsize=22, ha="center", va="center",
                            transform=ax.transAxes, weight="bold")
                    ax.text(x, 0.18, name, color="#ccccdc", fontsize=7, ha="center", transform=ax.transAxes)
            else:
                shown = lines[:12]
                for i, (name, value) in enumerate(shown):
                    y = 0.9 - i * (0.8 / max(len(shown), 1))
                    ax.text(0.02, y, name, color="#ccccdc", fontsize=7, transform=ax.transAxes, va="center")
                    ax.text(0.98, y, value, color="#73bf69", fontsize=7, ha="right", transform=ax.transAxes,
                            va="center")
                if len(lines) > len(shown):
                    ax.text(0.5, 0.03, f"… {len(lines) - len(shown)} more", color="#8e8e8e", fontsize=6,
                            ha="center", transform=ax.transAxes)
    fig.savefig(a.out, dpi=60, facecolor=fig.get_facecolor())
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
