"""Launch builders, one module per framework: `miles.build_miles_launch`, `verl.build_verl_launch`."""
