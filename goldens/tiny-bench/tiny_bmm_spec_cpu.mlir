module @cpu_spec attributes {transform.with_named_sequence} {
  transform.named_sequence @apply_op_config(%op: !transform.any_op {transform.readonly},
                                            %config: !transform.any_param {transform.readonly}) {
    transform.annotate %op "compilation_info" = %config : !transform.any_op, !transform.any_param
    transform.yield
  }
  transform.named_sequence @match_bmm(%op: !transform.any_op {transform.readonly})
      -> (!transform.any_op, !transform.any_param) {
    transform.match.operation_name %op ["linalg.batch_matmul"] : !transform.any_op
    %config = transform.param.constant #iree_codegen.compilation_info<
      lowering_config = #iree_cpu.lowering_config<distribution = [1, 16, 16, 0],
        vector_common_parallel = [1, 4, 4, 0], vector_reduction = [0, 0, 0, 4]>,
      translation_info = #iree_codegen.translation_info<
        pipeline = #iree_cpu.pipeline<DoubleTilingExpert>>> -> !transform.any_param
    transform.yield %op, %config : !transform.any_op, !transform.any_param
  }
  transform.named_sequence @__kernel_config(%variant: !transform.any_op {transform.consumed})
      -> !transform.any_op attributes { iree_codegen.tuning_spec_entrypoint } {
    %res = transform.foreach_match in %variant @match_bmm -> @apply_op_config
      : (!transform.any_op) -> !transform.any_op
    transform.yield %res : !transform.any_op
  }
}
