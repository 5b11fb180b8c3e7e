"""The FID InceptionV3: the 2015 TensorFlow graph's layout, as MLPerf's pytorch-fid copy builds it.

It is torchvision's Inception3 with four kinds of mixed block patched the way the TF graph
differs: the 3x3 average pools of the A, C and first E blocks exclude padding from the mean,
and the last E block max-pools instead. Module names equal torchvision's, so the published
`pt_inception-2015-12-05-6726825d.pth` loads with `strict=True`. Only the pool3 features
(2048-d, the input to the classifier) are computed; the `fc` layer is kept so the state dict
matches the file exactly, but is never run.
"""

from __future__ import annotations

import numpy as np

FEATURE_DIMS = 2048
INPUT_SIZE = 299


def _torch():
    import torch
    import torch.nn.functional as F

    return torch, F


def _patched_blocks():
    """Subclasses of torchvision's blocks whose forward follows the TF graph (built lazily,
    so importing this module does not import torch)."""
    torch, F = _torch()
    from torchvision.models import inception as tv

    def tf_avg_pool(x):
        # TF's 3x3/1 SAME average pool divides by the number of real pixels in the window.
        return F.avg_pool2d(x, kernel_size=3, stride=1, padding=1, count_include_pad=False)

    class BlockA(tv.InceptionA):
        def forward(self, x):
            b5 = self.branch5x5_2(self.branch5x5_1(x))
            b3 = self.branch3x3dbl_3(self.branch3x3dbl_2(self.branch3x3dbl_1(x)))
            return torch.cat([self.branch1x1(x), b5, b3, self.branch_pool(tf_avg_pool(x))], 1)

    class BlockC(tv.InceptionC):
        def forward(self, x):
            b7 = self.branch7x7_3(self.branch7x7_2(self.branch7x7_1(x)))
            d = x
            for layer in (self.branch7x7dbl_1, self.branch7x7dbl_2, self.branch7x7dbl_3,
                          self.branch7x7dbl_4, self.branch7x7dbl_5):
                d = layer(d)
            return torch.cat([self.branch1x1(x), b7, d, self.branch_pool(tf_avg_pool(x))], 1)

    class BlockE(tv.InceptionE):
        max_pool = False

        def forward(self, x):
            b3 = self.branch3x3_1(x)
            b3 = torch.cat([self.branch3x3_2a(b3), self.branch3x3_2b(b3)], 1)
            d = self.branch3x3dbl_2(self.branch3x3dbl_1(x))
            d = torch.cat([self.branch3x3dbl_3a(d), self.branch3x3dbl_3b(d)], 1)
            pooled = (F.max_pool2d(x, kernel_size=3, stride=1, padding=1) if self.max_pool
                      else tf_avg_pool(x))
            return torch.cat([self.branch1x1(x), b3, d, self.branch_pool(pooled)], 1)

    class BlockEMax(BlockE):
        # The TF graph's last block max-pools (a quirk of that graph, kept for equal features).
        max_pool = True

    return BlockA, BlockC, BlockE, BlockEMax


def build_fid_inception():
    """An uninitialised FID InceptionV3 (weights come from `load_state_dict` or `seeded_init`)."""
    torch, F = _torch()
    from torchvision.models import inception as tv

    block_a, block_c, block_e, block_e_max = _patched_blocks()

    class FidInceptionV3(tv.Inception3):
        """Input N x 3 x H x W float in [0, 1]; output N x 2048 pool3 features (float32)."""

        def __init__(self):
            super().__init__(num_classes=1008, aux_logits=False, init_weights=False)
            self.Mixed_5b = block_a(192, pool_features=32)
            self.Mixed_5c = block_a(256, pool_features=64)
            self.Mixed_5d = block_a(288, pool_features=64)
            self.Mixed_6b = block_c(768, channels_7x7=128)
            self.Mixed_6c = block_c(768, channels_7x7=160)
            self.Mixed_6d = block_c(768, channels_7x7=160)
            self.Mixed_6e = block_c(768, channels_7x7=192)
            self.Mixed_7b = block_e(1280)
            self.Mixed_7c = block_e_max(2048)
            self.eval()
            for p in self.parameters():
                p.requires_grad_(False)

        def forward(self, x):
            return self.features(self.prepare(x))

        @staticmethod
        def prepare(x):
            """pytorch-fid's preprocessing: bilinear resize without antialiasing, then
            [-1, 1]. Apart from `features` so a loader thread can run it ahead."""
            x = F.interpolate(x, size=(INPUT_SIZE, INPUT_SIZE), mode="bilinear",
                              align_corners=False)
            return 2 * x - 1

        def features(self, x):
            """The network proper on prepared 299x299 input."""
            for layer in (self.Conv2d_1a_3x3, self.Conv2d_2a_3x3, self.Conv2d_2b_3x3,
                          self.maxpool1, self.Conv2d_3b_1x1, self.Conv2d_4a_3x3, self.maxpool2,
                          self.Mixed_5b, self.Mixed_5c, self.Mixed_5d, self.Mixed_6a,
                          self.Mixed_6b, self.Mixed_6c, self.Mixed_6d, self.Mixed_6e,
                          self.Mixed_7a, self.Mixed_7b, self.Mixed_7c):
                x = layer(x)
            return torch.flatten(self.avgpool(x), 1)

    return FidInceptionV3()


def seeded_init(model, seed: int) -> None:
    """He (Kaiming) normal initialisation, N(0, 2 / fan_in), on every conv and linear weight,
    batch norm at identity, drawn from a fixed torch seed.

    Why not torchvision's own Inception3 init (N(0, 0.1)): with batch norm frozen at identity
    (eval mode, no trained statistics) its activations grow ~100x per stage, to 1e10 at pool3.
    He init keeps every layer's activations O(1), as the trained network's are, so the random
    features still respond to image content.
    """
    torch, _ = _torch()
    from torch import nn

    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.Conv2d | nn.Linear):
                fan_in = m.weight[0].numel()
                m.weight.copy_(torch.randn(m.weight.shape, generator=gen)
                               * (2.0 / fan_in) ** 0.5)
                if m.bias is not None:
                    m.bias.zero_()
            elif isinstance(m, nn.BatchNorm2d):
                m.weight.fill_(1.0)
                m.bias.zero_()
                m.reset_running_stats()  # mean 0, variance 1


def images_to_unit_float(images: np.ndarray):
    """uint8 N x H x W x 3 -> float32 N x 3 x H x W in [0, 1], as torchvision's ToTensor
    (MLPerf's FID input): a float32 cast, then division by 255. Contiguous NCHW, like the
    stacked ToTensor outputs: a permuted (channels-last) tensor sends convolutions down
    another kernel path whose features differ in the last bits."""
    torch, _ = _torch()
    t = torch.from_numpy(np.ascontiguousarray(images)).permute(0, 3, 1, 2).contiguous()
    return t.to(torch.float32).div_(255)  # in place: the same kernel, no second 12 MB tensor
