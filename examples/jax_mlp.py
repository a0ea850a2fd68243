"""A small JAX training loop on CPU: dlscope profile --framework jax -o jax.sqlite -- python examples/jax_mlp.py

Unmodified JAX: `train_step` is a jax.jit function called once per step, which is how the capture finds the
steps. `--steps N` sets how many training steps run (default 12).
"""

import argparse

import jax
import jax.numpy as jnp


def init(key, sizes):
    keys = jax.random.split(key, len(sizes) - 1)
    return [(jax.random.normal(k, (m, n)) * (2.0 / m) ** 0.5, jnp.zeros(n))
            for k, m, n in zip(keys, sizes[:-1], sizes[1:])]


def forward(params, x):
    for w, b in params[:-1]:
        x = jax.nn.relu(x @ w + b)
    w, b = params[-1]
    return x @ w + b


def loss_fn(params, x, y):
    return jnp.mean((forward(params, x) - y) ** 2)


@jax.jit
def train_step(params, x, y):
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    return jax.tree_util.tree_map(lambda p, g: p - 1e-3 * g, params, grads), loss


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--batch-size", type=int, default=64)
    args = parser.parse_args()
    key = jax.random.PRNGKey(0)
    params = init(key, [128, 256, 256, 10])
    for step in range(args.steps):
        key, kx = jax.random.split(key)
        x = jax.random.normal(kx, (args.batch_size, 128))
        y = jnp.sin(x[:, :10])
        params, loss = train_step(params, x, y)
        loss.block_until_ready()
    print(f"final loss {float(loss):.4f}")


if __name__ == "__main__":
    main()
