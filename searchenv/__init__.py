"""searchenv"""
