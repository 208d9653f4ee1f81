# Thin root Makefile: everything lives in dev/cuda (llm.c's layout).
#   make                  build every op, fp32 and bf16
#   make repkv_backward   build one op (then ./dev/cuda/repkv_backward)
#   make test             the test command (CPU parts everywhere, GPU parts where there is a GPU)
#   make run_all          every version of every op at the bench sizes -> results/<gpu>.md
#   make sanitize         compute-sanitizer memcheck and racecheck over every version (GPU only)
#   make fuzz / fuzz_gpu  random command lines for every op (scripts/fuzz.py), without / on the GPU
.PHONY: all test run_all clean sanitize fuzz fuzz_gpu
all:
	$(MAKE) -C dev/cuda all
test:
	bash scripts/test.sh
run_all:
	$(MAKE) -C dev/cuda all && python3 scripts/run_all.py --run
sanitize:
	bash scripts/sanitize.sh
fuzz fuzz_gpu:
	$(MAKE) -C dev/cuda $@
clean:
	$(MAKE) -C dev/cuda clean && rm -rf build
%:
	$(MAKE) -C dev/cuda $@
