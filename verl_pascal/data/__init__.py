"""GSM8K data for verl: conversion to verl's parquet schema and a generator of
GSM8K-format problems for runs that cannot download the real set."""
