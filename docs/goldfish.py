"""Draws goldfish.jpg, the image the README's commands classify (`python docs/goldfish.py`).

No photo of a goldfish can be fetched where this project is built, and a repository may only carry images it may
give away: this one is drawn here, with Pillow, and is the project's own. Classify your own photos for real answers.
"""

from __future__ import annotations

import math
import random
from pathlib import Path

from PIL import Image, ImageDraw, ImageFilter

WIDTH, HEIGHT = 500, 375


def draw() -> Image.Image:
    rng = random.Random(1)
    water = Image.new("RGB", (WIDTH, HEIGHT))
    pixels = water.load()
    for y in range(HEIGHT):  # lighter at the top, as light falls into a tank
        for x in range(WIDTH):
            t = y / HEIGHT
            pixels[x, y] = (int(40 + 30 * (1 - t)), int(110 + 60 * (1 - t) + 10 * math.sin(x / 37)), int(150 + 70 * (1 - t)))
    scene = ImageDraw.Draw(water, "RGBA")
    for _ in range(7):  # weed at the bottom
        x = rng.randint(0, WIDTH)
        for k in range(40):
            y = HEIGHT - k * 4
            scene.ellipse((x - 6 + 8 * math.sin(k / 4), y - 6, x + 6 + 8 * math.sin(k / 4), y + 6), fill=(40, 120, 60, 150))
    for _ in range(12):  # bubbles
        x, y, r = rng.randint(320, 480), rng.randint(20, 200), rng.randint(3, 9)
        scene.ellipse((x - r, y - r, x + r, y + r), outline=(220, 240, 255, 200), width=2)

    fish = Image.new("RGBA", (WIDTH, HEIGHT), (0, 0, 0, 0))
    body = ImageDraw.Draw(fish)
    cx, cy = 230, 190
    body.polygon([(cx - 95, cy), (cx - 190, cy - 75), (cx - 165, cy), (cx - 190, cy + 80)], fill=(240, 130, 30, 210))
    body.polygon([(cx - 40, cy - 55), (cx + 10, cy - 115), (cx + 45, cy - 55)], fill=(235, 120, 25, 230))  # dorsal
    body.ellipse((cx - 120, cy - 70, cx + 120, cy + 70), fill=(245, 145, 30, 255))
    body.ellipse((cx - 80, cy - 50, cx + 110, cy + 20), fill=(252, 185, 70, 255))  # the light on its back
    for row in range(-2, 3):  # scales
        for col in range(-3, 4):
            x, y = cx + col * 26 + (row % 2) * 13, cy + row * 22
            body.arc((x - 14, y - 12, x + 14, y + 12), 200, 340, fill=(215, 105, 20, 255), width=2)
    body.polygon([(cx + 10, cy + 35), (cx - 20, cy + 85), (cx + 40, cy + 55)], fill=(240, 140, 40, 200))  # fin
    body.ellipse((cx + 70, cy - 30, cx + 96, cy - 4), fill=(255, 255, 255, 255))
    body.ellipse((cx + 78, cy - 24, cx + 93, cy - 9), fill=(10, 10, 10, 255))
    body.arc((cx + 95, cy + 5, cx + 115, cy + 22), 90, 200, fill=(150, 60, 10, 255), width=3)  # mouth
    fish = fish.filter(ImageFilter.GaussianBlur(1.2))
    water.paste(fish, (0, 0), fish)
    return water.filter(ImageFilter.GaussianBlur(0.6))


if __name__ == "__main__":
    out = Path(__file__).resolve().parent.parent / "goldfish.jpg"
    draw().save(out, quality=90)
    print(out)
