"""The training step of a GAN, made by a factory: a few discriminator steps, then one generator step."""
import torch
import torch.nn.functional as F
import torch_xla.core.xla_model as xm


def make_gan_step(generator, discriminator, g_optimizer, d_optimizer, d_steps=2, latent=128):
    def gan_step(real):
        for _ in range(d_steps):
            d_optimizer.zero_grad()
            noise = torch.randn(real.shape[0], latent, device=real.device)
            fake_scores = discriminator(generator(noise).detach())
            d_loss = F.softplus(fake_scores).mean() + F.softplus(-discriminator(real)).mean()
            d_loss.backward()
            xm.optimizer_step(d_optimizer)
        g_optimizer.zero_grad()
        noise = torch.randn(real.shape[0], latent, device=real.device)
        g_loss = F.softplus(-discriminator(generator(noise))).mean()
        g_loss.backward()
        xm.optimizer_step(g_optimizer)
        return {"g_loss": g_loss.item(), "d_loss": d_loss.item()}

    return gan_step


def evaluate(discriminator, loader):
    """The discriminator's mean score over a held-out loader, once per epoch."""
    total = torch.zeros((), device=xm.xla_device())
    for images, _ in loader:
        total += discriminator(images).mean()
        xm.mark_step()
    return total.item() / len(loader)
