"""Typed, validated configuration: one pydantic model per component, YAML recipes, dotted overrides."""

from bertkit.config.recipe import FinetuneRecipe, PretrainRecipe, load_recipe, recipe_names

__all__ = ["FinetuneRecipe", "PretrainRecipe", "load_recipe", "recipe_names"]
