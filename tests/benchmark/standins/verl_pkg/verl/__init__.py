"""TEST STAND-IN for the `verl` package (only `python3 -m verl.trainer.main_ppo`), never the real VERL."""
