"""Console scripts: one thin file each (argparse -> one library call -> exit code)."""
