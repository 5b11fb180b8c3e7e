module @compiled_unet_pipeline {
  func.func private @compiled_unet.run_initialize(tensor<1x4x16x16xf32>) -> (tensor<1x4x16x16xf32>, tensor<2x6xf32>)
  func.func private @compiled_unet.run_forward(tensor<1x4x16x16xf32>, tensor<2x64x96xf32>, tensor<2x64xf32>, tensor<2x6xf32>, tensor<1xf32>, tensor<1xi64>) -> tensor<1x4x16x16xf32>
  func.func @produce_image_latents(%sample: tensor<1x4x16x16xf32>, %embeds: tensor<2x64x96xf32>, %pooled: tensor<2x64xf32>,
                                   %guidance: tensor<1xf32>) -> tensor<1x4x16x16xf32> {
    %init, %time_ids = func.call @compiled_unet.run_initialize(%sample) : (tensor<1x4x16x16xf32>) -> (tensor<1x4x16x16xf32>, tensor<2x6xf32>)
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %steps = arith.constant 20 : index
    %out = scf.for %i = %c0 to %steps step %c1 iter_args(%latents = %init) -> (tensor<1x4x16x16xf32>) {
      %i64 = arith.index_cast %i : index to i64
      %step = tensor.from_elements %i64 : tensor<1xi64>
      %next = func.call @compiled_unet.run_forward(%latents, %embeds, %pooled, %time_ids,
                                                   %guidance, %step) : (tensor<1x4x16x16xf32>, tensor<2x64x96xf32>, tensor<2x64xf32>, tensor<2x6xf32>, tensor<1xf32>, tensor<1xi64>) -> tensor<1x4x16x16xf32>
      scf.yield %next : tensor<1x4x16x16xf32>
    }
    return %out : tensor<1x4x16x16xf32>
  }
}
