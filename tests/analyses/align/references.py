"""Permuted copies of networks built by hand from the definition (rows of a layer, columns of the next, every
BatchNorm tensor), independent of the spec under test, and the networks they are built for."""

import torch
from torch import nn


def randomise_bn(model, seed=3):
    """Every BatchNorm's affine parameters and running statistics random (so that permuting them matters)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.modules.batchnorm._BatchNorm):
                m.weight.copy_(torch.randn(m.weight.shape, generator=g))
                m.bias.copy_(torch.randn(m.bias.shape, generator=g))
                m.running_mean.copy_(torch.randn(m.running_mean.shape, generator=g))
                m.running_var.copy_(torch.rand(m.running_var.shape, generator=g) + 0.5)
    return model.eval()


def rows(state, name, p):
    state[name] = state[name][p]


def cols(state, name, p):
    state[name] = state[name][:, p]


def bn(state, prefix, p):
    for part in ("weight", "bias", "running_mean", "running_var"):
        rows(state, f"{prefix}.{part}", p)


def linear(state, prefix, p):
    rows(state, f"{prefix}.weight", p)
    if f"{prefix}.bias" in state:
        rows(state, f"{prefix}.bias", p)


def load(model, state):
    import copy

    other = copy.deepcopy(model)
    other.load_state_dict(state)
    return other.eval()


def mlp(widths=(16, 12, 9, 3), seed=0):
    torch.manual_seed(seed)
    layers = [nn.Flatten()]
    for k, (i, o) in enumerate(zip(widths[:-1], widths[1:])):
        layers.append(nn.Linear(i, o))
        if k < len(widths) - 2:
            layers.append(nn.ReLU() if k % 2 == 0 else nn.GELU())
    return nn.Sequential(*layers).eval()


def permuted_mlp(model, seed=1):
    """The MLP with every hidden layer's units in a random order (Sequential indices: Flatten, Linear, act, ...)."""
    g = torch.Generator().manual_seed(seed)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    linears = [str(i) for i, m in enumerate(model) if isinstance(m, nn.Linear)]
    for here, after in zip(linears[:-1], linears[1:]):
        p = torch.randperm(state[f"{here}.weight"].shape[0], generator=g)
        linear(state, here, p)
        cols(state, f"{after}.weight", p)
    return load(model, state)


class ResidualCNN(nn.Module):
    """conv-BN-ReLU, a residual block (conv-BN-ReLU-conv-BN + input, ReLU), flatten of a 4 x 4 map, Linear."""

    def __init__(self, c=6, classes=3):
        super().__init__()
        self.conv0, self.bn0 = nn.Conv2d(1, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
        self.conv1, self.bn1 = nn.Conv2d(c, 5, 3, padding=1), nn.BatchNorm2d(5)
        self.conv2, self.bn2 = nn.Conv2d(5, c, 3, padding=1), nn.BatchNorm2d(c)
        self.pool = nn.AdaptiveAvgPool2d(4)
        self.fc = nn.Linear(c * 16, classes)

    def forward(self, x):
        x = torch.relu(self.bn0(self.conv0(x)))
        y = self.bn2(self.conv2(torch.relu(self.bn1(self.conv1(x)))))
        return self.fc(torch.flatten(self.pool(torch.relu(x + y)), 1))


def permuted_residual_cnn(model, seed=1):
    g = torch.Generator().manual_seed(seed)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    stream, inner = torch.randperm(6, generator=g), torch.randperm(5, generator=g)
    rows(state, "conv0.weight", stream)
    bn(state, "bn0", stream)
    cols(state, "conv1.weight", stream)
    linear(state, "conv1", inner)
    bn(state, "bn1", inner)
    cols(state, "conv2.weight", inner)
    linear(state, "conv2", stream)
    bn(state, "bn2", stream)
    w = state["fc.weight"]
    state["fc.weight"] = w.reshape(w.shape[0], 6, 16)[:, stream].reshape(w.shape)  # 16 inputs per channel
    return load(model, state)


def permuted_resnet(model, stem, shortcut, seed=1):
    """A ResNet (basic blocks, post-activation) with its residual stream of every stage and each block's inner
    units in a random order: ``stem`` = (conv, bn) names, ``shortcut`` = the projection's name in a block."""
    g = torch.Generator().manual_seed(seed)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    blocks = sorted({k.rsplit(".conv1.weight", 1)[0] for k in state if k.endswith(".conv1.weight") and "layer" in k})
    blocks.sort(key=lambda b: [int(t) if t.isdigit() else t for t in b.replace("layer", "").split(".")])
    stream = torch.randperm(state[f"{stem[0]}.weight"].shape[0], generator=g)
    rows(state, f"{stem[0]}.weight", stream)
    bn(state, stem[1], stream)
    for b in blocks:
        cols(state, f"{b}.conv1.weight", stream)
        inner = torch.randperm(state[f"{b}.conv1.weight"].shape[0], generator=g)
        rows(state, f"{b}.conv1.weight", inner)
        bn(state, f"{b}.bn1", inner)
        cols(state, f"{b}.conv2.weight", inner)
        if f"{b}.{shortcut}.0.weight" in state:
            cols(state, f"{b}.{shortcut}.0.weight", stream)
            stream = torch.randperm(state[f"{b}.conv2.weight"].shape[0], generator=g)
            rows(state, f"{b}.{shortcut}.0.weight", stream)
            bn(state, f"{b}.{shortcut}.1", stream)
        rows(state, f"{b}.conv2.weight", stream)
        bn(state, f"{b}.bn2", stream)
    cols(state, "fc.weight", stream)
    return load(model, state)


@torch.no_grad()
def relative_difference(f, g, x):
    """``max |g(x) - f(x)| / max |f(x)|``, written from the definition."""
    fx, gx = f(x).double(), g(x).double()
    return float((gx - fx).abs().max() / fx.abs().max())


class TokenMLP(nn.Module):
    """Tokens (N, L, 4): an embedding, a pre-LayerNorm residual MLP block, a final LayerNorm, mean over tokens."""

    def __init__(self, d=6, h=5, classes=3):
        super().__init__()
        self.embed, self.ln1 = nn.Linear(4, d), nn.LayerNorm(d)
        self.fc1, self.fc2 = nn.Linear(d, h), nn.Linear(h, d)
        self.ln_f, self.head = nn.LayerNorm(d), nn.Linear(d, classes)
        with torch.no_grad():
            for ln in (self.ln1, self.ln_f):
                ln.weight.normal_()
                ln.bias.normal_()

    def forward(self, x):
        x = self.embed(x)
        x = x + self.fc2(nn.functional.gelu(self.fc1(self.ln1(x))))
        return self.head(self.ln_f(x).mean(1))


def permuted_token_mlp(model, seed=1):
    g = torch.Generator().manual_seed(seed)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    stream, inner = torch.randperm(6, generator=g), torch.randperm(5, generator=g)
    for name in ("embed", "ln1", "fc2", "ln_f"):
        linear(state, name, stream)
    cols(state, "fc1.weight", stream)
    cols(state, "head.weight", stream)
    linear(state, "fc1", inner)
    cols(state, "fc2.weight", inner)
    return load(model, state)


def randomise(model, seed=3, scale=0.3):
    """Every parameter and buffer random (LayerNorm weights, zero biases, the CLS token: permuting them matters)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for t in model.state_dict().values():
            if t.is_floating_point():
                t.copy_(torch.randn(t.shape, generator=g) * scale)
    return model.eval()


def permuted_vit(model, patch="patch_embed", seed=1, aware=True, fixed_heads=False):
    """A ViT (CLS token, absolute position embedding, pre-norm blocks of fused-qkv attention and an MLP, final
    LayerNorm, Linear head on the CLS token) with its residual stream, every attention module's heads and the
    units within them, and every MLP's hidden units in a random order.

    ``aware``: query/key rows one head-aware permutation, value rows and proj's columns another with the same
    head order; False: ONE permutation over all concatenated head dimensions for q, k, v and proj (not head-aware).
    A relative position table with one row per head (``attn.rel_pos.table``, ``cls_bias``) has its rows in the head
    order; a shift attention (values only, ``attn.v``) has its value rows and proj's columns permuted.
    ``fixed_heads``: every head keeps its place (only the units within heads move).
    """
    g = torch.Generator().manual_seed(seed)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    width = state["cls_token"].shape[-1]
    stream = torch.randperm(width, generator=g)
    linear(state, patch, stream)
    for name in ("cls_token", "pos_embed"):
        if name in state:
            state[name] = state[name][..., stream]
    for i, block in enumerate(model.blocks):
        b = f"blocks.{i}"
        heads, head_dim = block.attn.num_heads, block.attn.head_dim
        inner = heads * head_dim
        fused = f"{b}.attn.qkv.weight" in state
        qkv = f"{b}.attn.qkv" if fused else f"{b}.attn.v"
        linear(state, f"{b}.norm1", stream)
        cols(state, f"{qkv}.weight", stream)
        order = torch.arange(heads) if fixed_heads else torch.randperm(heads, generator=g)
        if aware:
            qk = torch.cat([int(order[h]) * head_dim + torch.randperm(head_dim, generator=g) for h in range(heads)])
            vo = torch.cat([int(order[h]) * head_dim + torch.randperm(head_dim, generator=g) for h in range(heads)])
        else:
            qk = vo = torch.randperm(inner, generator=g)
        linear(state, qkv, torch.cat([qk, inner + qk, 2 * inner + vo]) if fused else vo)
        for table in ("table", "cls_bias"):
            name = f"{b}.attn.rel_pos.{table}"
            if name in state and state[name].shape[0] == heads:
                rows(state, name, order)
        cols(state, f"{b}.attn.proj.weight", vo)
        linear(state, f"{b}.attn.proj", stream)
        linear(state, f"{b}.norm2", stream)
        cols(state, f"{b}.mlp.fc1.weight", stream)
        hidden = torch.randperm(state[f"{b}.mlp.fc1.weight"].shape[0], generator=g)
        linear(state, f"{b}.mlp.fc1", hidden)
        cols(state, f"{b}.mlp.fc2.weight", hidden)
        linear(state, f"{b}.mlp.fc2", stream)
    linear(state, "norm", stream)
    cols(state, "head.weight", stream)
    return load(model, state)


def random_permutations(spec, seed=1):
    """A random permutation for every permutation of a spec, from the definition: a plain one is any order of its
    units; a head-aware one (``heads > 1``) is a random head order shared by the permutations of one module
    (``heads_of``; the identity where heads keep their places) with a random order within each head."""
    g = torch.Generator().manual_seed(seed)
    orders, perms = {}, {}
    for p in spec.permutations:
        if p.heads == 1:
            perms[p.name] = torch.randperm(p.size, generator=g)
            continue
        d = p.size // p.heads
        if p.heads_of not in orders:
            orders[p.heads_of] = torch.arange(p.heads) if p.fixed_heads else torch.randperm(p.heads, generator=g)
        order = orders[p.heads_of]
        perms[p.name] = torch.cat([int(order[h]) * d + torch.randperm(d, generator=g) for h in range(p.heads)])
    return perms
