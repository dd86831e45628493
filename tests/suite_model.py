"""The suite's own small model: a classifier defined here, used through the code-model path (`--arch FILE.py:FUNC`)
by every test that is not about a real architecture. It has ResNet's operators (convolution, batch norm, ReLU, max
pool, a residual add, global average pooling, a linear head) at a small fraction of resnet18's work, and takes
ImageNet's input (3x224x224) and 1000 outputs, named with ImageNet's categories by SMALL_LABELS (given as
`--labels`, as a user names a model of their own), so that what the tests check about shapes and labels reads as it
would for a torchvision model."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

SMALL_ARCH = f"{Path(__file__).resolve()}:suite_classifier"
SMALL_LABELS = Path(__file__).resolve().parent / "data" / "suite_labels.txt"  # torchvision's ImageNet categories


class SuiteClassifier(nn.Module):
    def __init__(self, num_classes: int = 1000, channels: int = 3, width: int = 8):
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(channels, width, 7, stride=4, padding=3, bias=False), nn.BatchNorm2d(width), nn.ReLU(inplace=True),
            nn.MaxPool2d(3, stride=2, padding=1),
        )
        self.conv1 = nn.Conv2d(width, width, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(width, num_classes)
        # Logits spread as a trained classifier's (std about 2; PyTorch's default init gives 0.4): the probabilities
        # then tell inputs apart as resnet18's do (tests/client: a preprocessing mistake moves them by 5e-4 or more).
        nn.init.normal_(self.fc.weight, std=1.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        y = self.relu(self.bn1(self.conv1(x)))
        x = self.relu(x + self.bn2(self.conv2(y)))
        return self.fc(torch.flatten(self.pool(x), 1))


def suite_classifier(num_classes: int = 1000) -> nn.Module:
    return SuiteClassifier(num_classes)

