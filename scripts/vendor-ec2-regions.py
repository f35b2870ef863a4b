#!/usr/bin/env python3
"""Vendor per-region EC2 zone offerings into karpenter-core/data/ec2/ec2-zone-offerings.csv.

For every region moto 5.2.1 ships DescribeInstanceTypeOfferings data for (LocationType
availability-zone): each instance type and the letters of the zones that offer it
(`region,instance_type,zones`, e.g. `eu-west-1,m5.large,abc`).

On-demand prices stay those of us-east-1 (ec2-on-demand-prices.csv): upstream's generated tables
cover no other commercial region (upstream falls back to us-east-1 until its Pricing API
refresh answers), its GovCloud tables (vendored by scripts/vendor-ec2-prices.py) have no zone
offerings here to pair with, and its China table is in CNY.

Usage: scripts/vendor-ec2-regions.py   (needs `pip install 'moto[server]==5.2.1'`)
"""
import csv
import gzip
import json
import pathlib

import moto

ROOT = pathlib.Path(__file__).resolve().parent.parent
DATA = ROOT / "karpenter-core" / "data" / "ec2"
OFFERINGS = pathlib.Path(moto.__file__).parent / "ec2" / "resources" / "instance_type_offerings" / "availability-zone"


def zone_offerings():
    rows = []
    for path in sorted(OFFERINGS.glob("*.json.gz")):
        region = path.name[: -len(".json.gz")]
        by_type = {}
        for o in json.load(gzip.open(path)):
            zone = o["Location"]
            if not zone.startswith(region) or len(zone) != len(region) + 1:
                continue
            by_type.setdefault(o["InstanceType"], set()).add(zone[-1])
        for itype in sorted(by_type):
            rows.append((region, itype, "".join(sorted(by_type[itype]))))
    with open(DATA / "ec2-zone-offerings.csv", "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["region", "instance_type", "zones"])
        w.writerows(rows)
    return len({r[0] for r in rows}), len(rows)


if __name__ == "__main__":
    regions, offerings = zone_offerings()
    print(f"ec2-zone-offerings.csv: {regions} regions, {offerings} rows")
