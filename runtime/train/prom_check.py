"""Parses Prometheus text (a file, or a URL to scrape) with Debian's
python3-prometheus-client and prints one line per sample:
    <name> <sorted labels as k=v,...> <value>
Exits non-zero when the text does not parse.

usage: prom_check.py FILE_OR_URL
"""
import sys
import urllib.request

from prometheus_client.parser import text_string_to_metric_families


def main(src):
    if src.startswith("http://"):
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        text = opener.open(src, timeout=10).read().decode()
    else:
        text = open(src).read()
    n = 0
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            labels = ",".join("%s=%s" % kv for kv in sorted(s.labels.items()))
            print("%s %s %g" % (s.name, labels or "-", s.value))
            n += 1
    print("samples %d" % n)


if __name__ == "__main__":
    main(sys.argv[1])
