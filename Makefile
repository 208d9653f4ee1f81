# Thin root Makefile: everything lives in dev/cuda (llm.c's layout).
#   make                  build every op, fp32 and bf16
#   make repkv_backward   build one op (then ./dev/cuda/repkv_backward)
#   make test             the test command (CPU parts everywhere, GPU parts where there is a GPU)
#   make run_all          every version of every op at the bench sizes -> results/<gpu>.md
.PHONY: all test run_all clean
all:
	$(MAKE) -C dev/cuda all
test:
	bash scripts/test.sh
run_all:
	$(MAKE) -C dev/cuda all && python3 scripts/run_all.py --run
clean:
	$(MAKE) -C dev/cuda clean && rm -rf build
%:
	$(MAKE) -C dev/cuda $@
