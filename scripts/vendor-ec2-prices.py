#!/usr/bin/env python3
"""Vendor upstream's generated on-demand price tables into karpenter-core/data/ec2/ec2-on-demand-prices.csv.

Reads aws/karpenter-provider-aws's `pkg/providers/pricing/zz_generated.pricing_aws.go`
(us-east-1) and `zz_generated.pricing_aws_us_gov.go` (us-gov-east-1, us-gov-west-1) from a
checkout given as the only argument, and writes one row per region and instance type
(`region,instance_type,usd_per_hour`, six decimals as upstream prints them).

Upstream's China table (`zz_generated.pricing_aws_cn.go`) is in CNY, not USD, so it is left
out: every price in this project is USD/hour. Upstream generates no table for any other
region; a catalog of another region prices at us-east-1's, marked approximate.

Usage: scripts/vendor-ec2-prices.py PATH/TO/karpenter-provider-aws
"""
import csv
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / "karpenter-core" / "data" / "ec2" / "ec2-on-demand-prices.csv"
TABLES = ["zz_generated.pricing_aws.go", "zz_generated.pricing_aws_us_gov.go"]

REGION = re.compile(r'^\t"([a-z0-9-]+)": \{$')
PRICE = re.compile(r'"([a-z0-9.-]+)": ([0-9.]+)')


def table(path):
    """(region, instance type, price) in the file's order, regions as upstream keys them."""
    region = None
    for line in path.read_text().splitlines():
        m = REGION.match(line)
        if m:
            region = m.group(1)
            continue
        if region is None or line.lstrip().startswith("//"):
            continue
        for itype, price in PRICE.findall(line):
            yield region, itype, price


def main(checkout):
    src = pathlib.Path(checkout) / "pkg" / "providers" / "pricing"
    rows = []
    for name in TABLES:
        rows.extend(table(src / name))
    rows.sort(key=lambda r: (r[0], r[1]))
    with open(OUT, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["region", "instance_type", "usd_per_hour"])
        w.writerows(rows)
    regions = {}
    for r in rows:
        regions[r[0]] = regions.get(r[0], 0) + 1
    for region, n in sorted(regions.items()):
        print(f"{region}: {n} instance types")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
