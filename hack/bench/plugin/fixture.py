#!/usr/bin/env python3
"""Writes a `kdoctor store import` backup holding one NetReach round of N nodes, each probing
every node's agent pod (N × N cells), in the report shape agents write."""
import json
import sys

n = int(sys.argv[1])
uid = "00000000-0000-0000-0000-%012d" % n
out = sys.stdout
out.write(json.dumps({"type": "task", "kind": "NetReach", "name": f"mesh{n}", "uid": uid,
                      "created": "2026-01-01T00:00:00Z", "spec": {}, "status": {}}) + "\n")
for i in range(n):
    details = []
    for j in range(n):
        ok = 100 if (i + j) % 97 else 90
        details.append({
            "name": f"AgentPodV4IP_kdoctor-agent-{j:05d}_10.{j // 65536}.{j // 256 % 256}.{j % 256}",
            "url": f"http://10.{j // 65536}.{j // 256 % 256}.{j % 256}:80", "method": "GET",
            "requestSucceed": ok == 100, "requestMeanDelay": 0.4, "requestSucceedRate": ok / 100,
            "requestTargetMetrics": {
                "requestStartTime": "2026-01-01T00:01:00Z", "requestEndTime": "2026-01-01T00:01:10Z",
                "requestDuration": "10s", "requestCounts": 100, "successCounts": ok, "tps": 10.0,
                "errors": {}, "latencies": {"p50InMs": 0.4, "p90InMs": 0.6, "p95InMs": 0.7,
                              "p99InMs": 0.5 + abs(i - j) % 50, "maxInMs": 2.0, "minInMs": 0.1,
                              "meanInMs": 0.4},
                "existsNotSendRequests": False,
                "totalDataSize": "36000 byte", "statusCodes": {"200": ok}}})
    report = {"roundNumber": 1, "roundResult": "succeed", "nodeName": f"node-{i:05d}",
              "podName": f"kdoctor-agent-{i:05d}", "roundStartTimeStamp": "2026-01-01T00:01:00Z",
              "roundEndTimeStamp": "2026-01-01T00:01:11Z", "roundDuration": "11s",
              "taskNetReach": {"targetType": "NetReach", "targetNumber": n, "roundSucceed": True,
                               "systemResource": {"maxCPU": "1%", "meanCPU": "1%", "maxMemory": "10MB"},
                               "runningLoadTotal": {"appHttpHealthyQPS": 0, "netReachQPS": 10, "netDnsQPS": 0},
                               "roundTaskDetail": details}}
    out.write(json.dumps({"type": "report", "uid": uid, "report": report}) + "\n")
