# ruff: noqa: E501  (a table of node ids and reasons, one entry per line)
"""Which tests run in the slow tier although their code is in a fast-tier function.

The fast tier (``make test``) must stay under 10 minutes on 2 cores (issue #36). A test
moves here when it repeats a case that a fast test covers (one variant of several, a
program already compared by a fast test), or when it is an end-to-end run whose parts have
fast unit tests; the reason says which. The choice is made from CPU seconds, not wall
time (``TRANSFLOW_TEST_CPU_LOG=path make test`` writes one line per test; wall time grows
with the load of a shared machine, CPU time does not). ``make test-slow`` runs them.

tests/conftest.py marks every id below ``slow`` at collection, and fails the collection
when an id here no longer names a collected test (so the list cannot rot silently).
"""

#: node id -> why it is in the slow tier
MOVED_TO_SLOW: dict[str, str] = {
    "tests/test_splitting.py::test_nested_remat_equals_plain_evolve[5-None]": "nested remat values; its program is compared with the plain loop's in tests/test_execution_options.py (fast)",
    "tests/test_splitting.py::test_remat_gives_identical_gradients": "remat gradients evaluated; the fast tier compares their programs (tests/test_execution_options.py)",
    "tests/test_splitting.py::test_unroll_changes_nothing_but_speed[none-True]": "one unroll variant of several; the others stay fast",
    "tests/test_parallel_devices.py::test_two_processes_jax_distributed_match_single_process": "two JAX processes; the one-process sharded checks stay fast",
    "tests/test_parallel_devices.py::test_sharded_equals_single_device_float64_fast": "multi-device processes (14 s CPU); the one-device mesh checks of tests/test_parallel.py stay fast",
    "tests/test_parallel_devices.py::test_token_sharding_memory_falls_like_one_over_p": "a memory-scaling measurement",
    "tests/test_packaging.py::test_installed_wheel_runs_an_experiment_from_any_directory": "builds and installs a wheel, then runs an experiment",
    "tests/test_cli.py::test_cli_piped_training_prints_progress_and_fills_run_log": "a full training through a pipe; the progress logic has fast unit tests",
    "tests/test_control_grad.py::test_float32_gradients_agree_with_float64": "float32 gradients; float32 forward agreement stays fast (tests/test_layer_schemes.py, tests/test_interop_torch.py)",
    "tests/test_hf_t5.py::test_t5_matches_hf_with_padding[T5EncoderModel-gated-gelu]": "the encoder alone (9 s CPU); T5Model with padding stays fast, the gated-GELU T5Model stays fast in test_t5_matches_hf_without_mask",
    "tests/test_hf_t5.py::test_t5_matches_hf_with_padding[T5EncoderModel-relu]": "the encoder alone; T5Model (encoder and decoder) with padding stays fast",
    "tests/test_experiments.py::test_smoke_run_every_experiment[train_sequence]": "a smoke training in a subprocess; equivalence and clustering smoke runs stay fast",
    "tests/test_experiments.py::test_smoke_run_every_experiment[train_digits]": "a smoke training in a subprocess",
    "tests/test_experiments.py::test_smoke_run_every_experiment[expressivity]": "a smoke run in a subprocess; the expressivity checks have their own fast tests",
    "tests/test_experiments.py::test_smoke_run_every_experiment[sharded]": "a smoke run in a subprocess",
    "tests/test_experiments.py::test_smoke_run_every_experiment[nonconvergence]": "a smoke run in a subprocess",
    "tests/test_experiments.py::test_smoke_run_every_experiment[convergence]": "a smoke run in a subprocess",
    "tests/test_experiments.py::test_smoke_run_every_experiment[vit_equivalence]": "a smoke run in a subprocess",
    "tests/test_experiments.py::test_smoke_run_every_experiment[grid_refinement]": "a smoke run in a subprocess",
    "tests/test_analysis.py::test_analyze_a_save_pretrained_directory[vit]": "the BERT directory case stays fast",
    "tests/test_doctests.py::test_docstring_examples[transflow.expressivity._trained]": "its examples train models (8 s CPU)",
    "tests/test_doctests.py::test_docstring_examples[transflow._llama_ops]": "examples of functions with their own fast tests (7 s CPU)",
    "tests/test_doctests.py::test_docstring_examples[transflow.analysis._study]": "examples of functions with their own fast tests (7 s CPU)",
    "tests/test_doctests.py::test_docstring_examples[transflow.control._train]": "its examples train (7 s CPU)",
    "tests/test_doctests.py::test_docstring_examples[transflow.models._flow]": "examples of functions with their own fast tests (5 s CPU)",
    "tests/test_doctests.py::test_docstring_examples[transflow._chunked]": "examples of functions with their own fast tests (5 s CPU)",
    "tests/test_layer_schemes.py::test_perturbation_growth_is_the_largest_singular_value": "a stability measurement over many steps",
    "tests/test_perf_chunked.py::test_online_softmax_attention_without_weights_values_and_gradients[96-True]": "one size of three; the others stay fast",
    "tests/test_perf_chunked.py::test_online_softmax_attention_without_weights_values_and_gradients[100-False]": "one size of three; the others stay fast",
    "tests/test_perf.py::test_auto_unroll_unrolls_short_loops_and_scans_long_ones": "a compile-cost heuristic, not a correctness check",
    "tests/test_layer_schemes.py::test_float32_agrees_with_float64[strang_post]": "one scheme of the second-order class; rk4's stays fast",
    "tests/test_analysis.py::test_trajectory_ends_at_the_model_output[digits]": "one model family of seven; the split and torch ones stay fast",
    "tests/test_analysis.py::test_trajectory_ends_at_the_model_output[hf_cvt]": "one model family of seven",
    "tests/test_analysis.py::test_trajectory_ends_at_the_model_output[hf_gpt2]": "one model family of seven",
    "tests/test_masks.py::test_ragged_batch_equals_each_sequence_alone[prenorm_chunked]": "one variant; the lie variant stays fast",
    "tests/test_masks.py::test_kept_rows_do_not_change_when_padded_tokens_change[chunked-True]": "one variant of four",
    "tests/test_masks.py::test_chunked_equals_dense_with_masks_values_and_gradients[float_inf-True-True]": "one mask kind of several",
    "tests/test_doctests.py::test_docstring_examples[transflow.models._cvt]": "examples of functions with their own fast tests (4 s CPU)",
    "tests/test_doctests.py::test_docstring_examples[transflow.control._text]": "its examples train a char LM (4 s CPU)",
    "tests/test_control_grad.py::test_gradients_match_central_finite_differences": "finite differences (12 s CPU); the same gradients are compared with torch autograd in the fast tier (test_gradients_equal_torch_autograd)",
    "tests/test_doctests.py::test_docstring_examples[transflow._evolve]": "examples of evolve (8 s CPU); the options of evolve have fast tests in tests/test_splitting.py and tests/test_execution_options.py",
    "tests/test_interop_torch.py::test_encoder_stack[False-False-6]": "six layers repeat the stacking that the 1- and 2-layer cases check",
    "tests/test_interop_torch.py::test_encoder_stack[False-True-6]": "six layers repeat the stacking that the 1- and 2-layer cases check",
    "tests/test_interop_torch.py::test_encoder_stack[True-False-6]": "six layers repeat the stacking that the 1- and 2-layer cases check",
    "tests/test_interop_torch.py::test_encoder_stack[True-True-6]": "six layers repeat the stacking that the 1- and 2-layer cases check",
    "tests/test_layer_schemes.py::test_every_scheme_runs_with_evolve_and_masks[strang_post]": "strang_post runs through evolve in the fast test_the_chunked_operator_is_supported[strang_post]; lie, prenorm and imex stay here",
    "tests/test_layer_schemes.py::test_every_scheme_runs_with_evolve_and_masks[rk4]": "rk4 runs through evolve with a causal mask in the fast test_char_lm_is_causal_with_every_scheme[rk4]",
    "tests/test_layer_schemes.py::test_every_scheme_runs_with_evolve_and_masks[ode_rk2]": "ode_rk2 runs through evolve with a causal mask in the fast test_char_lm_is_causal_with_every_scheme[ode_rk2]",
    "tests/test_analysis.py::test_trajectory_ends_at_the_model_output[torch_preln]": "the torch post-LN and the split pre-norm cases stay fast",
    "tests/test_analysis.py::test_trajectory_ends_at_the_model_output[hf_vit]": "the HF BERT and Llama cases stay fast",
    "tests/test_masks.py::test_chunked_equals_dense_with_masks_values_and_gradients[bool-True-False]": "boolean masks equal -inf float masks (fast test_bool_mask_equals_minus_inf_float_and_causal_flag); the float case of this test stays fast",
    "tests/test_perf_chunked.py::test_chunked_gradient_matches_dense[False-True]": "a causal variant; the non-causal softmax and hardmax variants stay fast, and causal block skipping is checked in the fast test_causal_skips_key_blocks_above_the_diagonal",
    "tests/test_perf_chunked.py::test_chunked_gradient_matches_dense[True-True]": "a causal variant; the non-causal softmax and hardmax variants stay fast, and causal block skipping is checked in the fast test_causal_skips_key_blocks_above_the_diagonal",
    "tests/test_hf_t5.py::test_t5_matches_hf_with_padding[T5Model-gated-gelu]": "gated GELU with padding; T5ForConditionalGeneration-gated-gelu with padding stays fast",
}
