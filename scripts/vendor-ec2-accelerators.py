#!/usr/bin/env python3
"""Add the Neuron and EFA columns to karpenter-core/data/ec2/ec2-instance-types.csv.

Source: the DescribeInstanceTypes data shipped in the moto package 5.2.1
(`moto/ec2/resources/instance_types.json.gz`), the same source as the rest of the file.
Columns added (empty or 0 when EC2 reports none):
  neuron_devices       NeuronInfo: total Neuron devices (aws.amazon.com/neuron)
  neuron_cores         NeuronInfo: devices x cores per device (aws.amazon.com/neuroncore)
  efa_max_interfaces   NetworkInfo.EfaInfo.MaximumEfaInterfaces (vpc.amazonaws.com/efa)
Run from the repository root with moto installed; rewrites the CSV in place.
"""
import csv, gzip, io, json, os, sys

import moto

PATH = "karpenter-core/data/ec2/ec2-instance-types.csv"
COLUMNS = ["neuron_devices", "neuron_cores", "efa_max_interfaces"]

data = json.load(gzip.open(os.path.join(os.path.dirname(moto.__file__), "ec2/resources/instance_types.json.gz")))
with open(PATH, newline="") as f:
    rows = list(csv.DictReader(f))
fields = [c for c in rows[0].keys() if c not in COLUMNS] + COLUMNS
for row in rows:
    info = data.get(row["instance_type"], {})
    devices = (info.get("NeuronInfo") or {}).get("NeuronDevices") or []
    row["neuron_devices"] = sum(d.get("Count", 0) for d in devices)
    row["neuron_cores"] = sum(d.get("Count", 0) * (d.get("CoreInfo") or {}).get("Count", 0) for d in devices)
    row["efa_max_interfaces"] = ((info.get("NetworkInfo") or {}).get("EfaInfo") or {}).get("MaximumEfaInterfaces", 0)
out = io.StringIO()
w = csv.DictWriter(out, fieldnames=fields, lineterminator="\n")
w.writeheader()
w.writerows(rows)
open(PATH, "w").write(out.getvalue())
print(f"{len(rows)} rows", file=sys.stderr)
